"""What the tests share, written once (tests/README.md lists the modules): settings and their
refusals, launching ranks and processes, comparing frames, tiny checkpoints, LoRA files and
images, the references from diffusers and the official code, the fake-GPU and ahead-of-time
harnesses. Test modules import from here, never from each other."""
