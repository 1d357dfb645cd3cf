"""Servers as users start them, for the tests: processes/servers.py's, whose failures (the
server ended, a wait ran out) fail the test with the end of the server's log; the tiny settings
the server tests share."""

import json

import numpy as np
import pytest

from processes.servers import ServerProcesses

# The tiny model, small and fp32 (the CLI's reference settings: harness.cli), a dead peer
# noticed within a minute.
SETTINGS = [
    "model=tiny",
    "dtype=float32",
    "steps=4",
    "num_frames=9",
    "height=64",
    "width=64",
    "save_frames=true",
    "dist_timeout_s=60",
]
KEY = "test-key-0123456789"


class Server(ServerProcesses):
    def fail(self, what: str):
        pytest.fail(f"{what}\n--- server log ---\n{self.text()[-6000:]}")

    def frames(self, video_id: str) -> np.ndarray:
        return np.load(self.storage / "videos" / f"{video_id}.frames.npy")


def sidecar(server: Server, video_id: str) -> dict:
    return json.loads((server.storage / "videos" / f"{video_id}.json").read_text())
