"""The denoising loop's hold point (parallel_wan/pipeline/denoise.py `HoldPoint`), which the tests
that act on a running job use (tests/harness/hold.py): unset, the loop never waits and touches no
file; set, a loop waits before step K with exactly K steps done, each loop of a process is the
gate's next arrival, a signal is noted only after its handler ran, Ctrl-C raises out of the wait,
and neither the planner's loop on meta tensors nor the compile rehearsal holds."""

import os
import signal
import threading

import pytest
import torch
from harness.hold import Hold

from parallel_wan.backends.contract import NoisePredictor
from parallel_wan.backends.torch import ops
from parallel_wan.config.compose import compose_spec
from parallel_wan.pipeline.denoise import denoise, rehearse_loop
from parallel_wan.pipeline.hold_point import HOLD_ENV, HoldPoint, hold_point
from parallel_wan.pipeline.steps import pick_schedule

STEPS = 4


class Counting(NoisePredictor):
    """A zero prediction; counts the steps that asked for one."""

    def __init__(self):
        self.calls = 0

    def __call__(self, expert, x, t, guidance):
        self.calls += 1
        return x * 0.0


@pytest.fixture(scope="module")
def run():
    spec = compose_spec([f"steps={STEPS}", "schedule=official"], output_dir="/tmp/unused")
    _, schedule = pick_schedule(spec, None)

    def loop(predict, x=None):
        x = torch.ones(1, 8, 4) if x is None else x
        return denoise(spec, schedule, x, predict, lambda steps: steps, ops)

    loop.spec, loop.schedule = spec, schedule
    return loop


def test_unset_the_loop_never_waits(run, monkeypatch):
    monkeypatch.delenv(HOLD_ENV, raising=False)
    monkeypatch.setattr(HoldPoint, "wait", lambda self: pytest.fail("waited without PARALLEL_WAN_TEST_HOLD"))
    predict = Counting()
    assert hold_point() is None
    assert run(predict).step == STEPS and predict.calls == STEPS


def test_a_held_loop_has_done_k_steps_and_each_loop_is_the_next_arrival(run, monkeypatch, tmp_path):
    hold = Hold(tmp_path, step=2)
    monkeypatch.setenv(HOLD_ENV, hold.env()[HOLD_ENV])
    for arrival in (1, 2):  # two loops of one process: each waits for its own release
        predict, states = Counting(), []
        worker = threading.Thread(target=lambda p=predict: states.append(run(p)))
        worker.start()
        assert hold.wait_held(alive=worker.is_alive) == arrival
        assert predict.calls == 2 and not states  # before step 2: two steps done, the loop not over
        hold.release()
        worker.join(timeout=120)
        assert states[0].step == STEPS and predict.calls == STEPS
    assert [kind for _, kind, _ in hold.notes()] == ["held", "held"]


def test_a_signal_is_noted_after_its_handler_ran_and_ctrl_c_raises_out_of_the_wait(run, monkeypatch, tmp_path):
    # The loop holds on this (main) thread, where handlers run; a helper thread plays the test.
    hold = Hold(tmp_path, step=1)
    monkeypatch.setenv(HOLD_ENV, hold.env()[HOLD_ENV])
    handled, seen_handled, interrupted = [], [], threading.Event()
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: handled.append(signum))
    # Ctrl-C as from a terminal, whatever this process has (a shell's background job ignores SIGINT)
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)

    def preempt_then_release():
        hold.wait_held()
        os.kill(os.getpid(), signal.SIGUSR1)
        hold.wait_signal("SIGUSR1")
        seen_handled.append(list(handled))  # the note came after the handler
        hold.release()

    def interrupt():
        hold.wait_held()
        os.kill(os.getpid(), signal.SIGINT)
        if not interrupted.wait(60):  # the loop did not raise: let it end, and the test fail, not hang
            hold.release()

    try:
        helper = threading.Thread(target=preempt_then_release)
        helper.start()
        assert run(Counting()).step == STEPS
        helper.join(timeout=120)
        assert seen_handled == [[signal.SIGUSR1]]
        helper = threading.Thread(target=interrupt)
        helper.start()
        predict = Counting()
        with pytest.raises(KeyboardInterrupt):
            try:
                run(predict)
            finally:
                interrupted.set()
        helper.join(timeout=120)
        assert predict.calls == 1
    finally:
        signal.signal(signal.SIGUSR1, previous)
        signal.signal(signal.SIGINT, previous_int)
    assert signal.set_wakeup_fd(-1) == -1  # the hold gave the wakeup fd back


def test_neither_the_planners_meta_loop_nor_the_rehearsal_holds(run, monkeypatch, tmp_path):
    hold = Hold(tmp_path, step=0)  # never released: a loop that held would wait here
    monkeypatch.setenv(HOLD_ENV, hold.env()[HOLD_ENV])
    monkeypatch.setattr(HoldPoint, "wait", lambda self: pytest.fail("held"))
    meta = torch.empty(1, 8, 4, device="meta")
    assert run(Counting(), meta).step == STEPS
    rehearse_loop(run.spec, run.schedule, torch.ones(1, 8, 4), ops)
    assert hold_point() == HoldPoint(0, str(hold.gate))  # it is set: only those loops skip it
