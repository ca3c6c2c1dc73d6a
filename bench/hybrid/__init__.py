"""The hybrid-attention models' cache checks on a GPU (`python -m bench.hybrid.gpu_check`)."""
