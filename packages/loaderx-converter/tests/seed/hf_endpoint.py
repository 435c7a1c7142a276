# Verbatim from the seed, section "Offline Hugging Face conversion" (endpoint).
from loaderx.converter import huggingface

dataset = huggingface(
    "ylecun/mnist",
    endpoint="https://hf-mirror.com",
)
