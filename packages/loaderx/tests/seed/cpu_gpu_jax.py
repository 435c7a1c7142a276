import jax

def to_device(batch):
    return {k: jax.device_put(v) for k, v in batch.items()}
