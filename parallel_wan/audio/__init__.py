"""Speech for S2V-14B: the audio file decoded (decode.py) and turned into wav2vec2 features per
video frame (wav2vec.py, features.py)."""
