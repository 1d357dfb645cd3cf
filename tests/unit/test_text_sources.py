"""Where a generation takes its texts' rows (issue 39 item 4): `Loaded.texts` is a TextSource —
a job's rows encoded up front, or a server's encoded on demand with the encoder kept — or None,
and then the loaded encoder encodes once and is released. No probing: generate asks the source."""

from types import SimpleNamespace

import numpy as np
from harness.settings import spec_for

from parallel_wan.pipeline.generate import encode_text, texts_of
from parallel_wan.pipeline.text_sources import EncodedOnDemand, EncodedUpFront, TextSource


class Rows:
    """What the encoder gives and the backend moves: an array with `.to(device)`."""

    def __init__(self, texts):
        self.texts = tuple(texts)
        self.array = np.array([[len(t)] for t in texts], dtype=np.float32)

    def to(self, device):
        return self


class Encoder:
    def __init__(self):
        self.encoded, self.released = [], False

    def encode(self, texts):
        assert not self.released, "encoded after release"
        self.encoded.append(tuple(texts))
        return Rows(texts)

    def release(self):
        self.released = True


MAIN = SimpleNamespace(
    encodes_text=True, text_device="cpu", broadcast_from_main=lambda x: x, ops=SimpleNamespace(cast=lambda x, dtype: x)
)


def test_each_source_gives_the_rows_of_the_texts_generate_asks_for():
    spec = spec_for("model=tiny", "prompt=a fox", "negative_prompt=blur")
    texts = tuple(texts_of(spec))
    assert texts == ("a fox", "blur")

    # a single run: the loaded encoder, once, then released
    encoder = Encoder()
    rows = encode_text(spec, SimpleNamespace(texts=None, text_encoder=encoder), MAIN)
    assert rows.texts == texts and encoder.encoded == [texts] and encoder.released

    # a job: the rows encoded before the first video; the encoder is not asked
    done = Encoder()
    done.released = True
    ahead = EncodedUpFront({texts: Rows(texts)})
    assert encode_text(spec, SimpleNamespace(texts=ahead, text_encoder=done), MAIN).texts == texts

    # a server: encoded when asked, the encoder kept for the next request
    encoder = Encoder()
    on_demand = EncodedOnDemand(encoder)
    for _ in range(2):
        assert encode_text(spec, SimpleNamespace(texts=on_demand, text_encoder=encoder), MAIN).texts == texts
    assert encoder.encoded == [texts, texts] and not encoder.released


def test_both_sources_are_text_sources_and_a_dict_is_not():
    assert isinstance(EncodedUpFront({}), TextSource) and isinstance(EncodedOnDemand(Encoder()), TextSource)
    assert not isinstance({}, TextSource)  # the duck-typed dict it replaced
