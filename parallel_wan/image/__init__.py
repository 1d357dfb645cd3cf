"""Image encoders: CLIP's vision tower, whose features Animate-14B attends to (clip.py)."""
