def collate(batch):
    return {'input_ids': batch['tokens'], 'label': batch['label']}

sampler = Sampler(len(dense_tokens), 32, Sampler.Mode.CYCLIC, seed=42)
loader = DataLoader({'tokens': dense_tokens, 'label': labelset}, sampler,
                    transform=collate)
batch = next(loader)
loader.close()
