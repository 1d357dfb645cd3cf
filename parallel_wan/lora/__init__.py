"""LoRA files per expert, merged into the weights while they load (merge.py), read as untrusted
input (read.py), in the three key formats users have (names.py); settings.py checks the
`lora*` settings without importing torch."""
