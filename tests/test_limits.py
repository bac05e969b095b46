"""serving/limits.py: at most ``slots`` threads are inside the limit at once, a thread holding a slot can enter
again, and model results computed from many threads through it equal the results computed one by one."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from analysis.analyze import teacher_forced
from model.decoding import greedy_batch
from model.facts import shift_right
from model.transformer import Transformer, TransformerConfig
from serving.limits import CallLimit

EOS = 2


@pytest.mark.parametrize("slots", [1, 2, 3])
def test_at_most_slots_threads_inside(slots):
    limit = CallLimit(slots)
    inside, peak, lock = 0, 0, threading.Lock()

    def call(_):
        nonlocal inside, peak
        with limit:
            with lock:
                inside += 1
                peak = max(peak, inside)
            time.sleep(0.01)  # long enough for the other threads to pile up at the door
            with lock:
                inside -= 1

    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(call, range(48)))
    assert peak == slots  # never more, and the slots were all used


def test_a_thread_holding_a_slot_enters_again():
    limit = CallLimit(1)
    done = threading.Event()

    def nested():
        with limit, limit:  # e.g. a cached call that computes another cached call
            done.set()

    t = threading.Thread(target=nested)
    t.start()
    t.join(5)
    assert done.is_set()
    with limit:  # the slot was given back
        pass


def test_a_released_slot_lets_another_thread_in_and_is_taken_back():
    """``released``: while the one slot's holder waits (for the model worker), another thread runs inside; after the
    block the holder takes the slot back when it is free, and never waits for it (the other may wait for the holder:
    a cached value the holder computes), so the two cannot deadlock."""
    limit = CallLimit(1)
    other_in, other_out, holder_done = threading.Event(), threading.Event(), threading.Event()

    def other():
        with limit:
            other_in.set()
            other_out.wait(5)  # e.g. waiting for a value the holder computes

    with limit, limit:  # depth 2
        t = threading.Thread(target=other)
        t.start()
        assert not other_in.wait(0.2), "the slot is held"
        with limit.released():
            assert other_in.wait(5), "a released slot lets the other thread in"
        assert limit._held.depth == 2 and not limit._held.slot, "the other holds the slot: the holder goes on without"
        holder_done.set()
        other_out.set()
        t.join(5)
    assert limit._acquire(blocking=False), "the other gave its slot back; the holder had none to give"
    limit._release()
    assert holder_done.is_set()
    with limit:
        with limit.released():  # nobody else: the slot is free after the block and taken back
            pass
        assert limit._held.slot and not limit._acquire(blocking=False), "the holder has the slot again"
    assert limit._acquire(blocking=False), "given back at the outermost exit"
    limit._release()
    with limit.released():  # a thread without a slot: unchanged
        assert getattr(limit._held, "depth", 0) == 0


def test_a_holder_without_its_slot_gives_back_nothing():
    limit = CallLimit(1)
    entered = threading.Event()
    leave = threading.Event()

    def other():
        with limit:
            entered.set()
            leave.wait(5)

    with limit:
        t = threading.Thread(target=other)
        t.start()
        with limit.released():
            assert entered.wait(5)
    leave.set()
    t.join(5)
    assert limit._acquire(blocking=False) and not limit._acquire(blocking=False), "still exactly one slot"
    limit._release()


def test_each_call_runs_torch_with_its_threads():
    limit = CallLimit(2, threads=1)
    seen = []

    def call():
        with limit:
            seen.append(torch.get_num_threads())

    threads = [threading.Thread(target=call) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == [1, 1, 1, 1]


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError):
        CallLimit(0)
    with pytest.raises(ValueError):
        CallLimit(2, threads=0)


def test_results_from_many_threads_equal_one_by_one():
    torch.manual_seed(0)
    cfg = TransformerConfig(
        vocab_size=23, d_model=16, n_heads=4, d_ff=32, n_enc_layers=2, n_dec_layers=2, dropout=0.0, tie_embeddings=False
    )
    model = Transformer(cfg).eval()
    with torch.no_grad():
        model.generator.weight.normal_(0.0, 1.0)  # peaky logits: outputs differ from source to source
    sources = [torch.randint(3, 23, (n,), generator=torch.Generator().manual_seed(n)).tolist() + [EOS] for n in range(3, 15)]
    limit = CallLimit(2, threads=1)

    def translate(ids):
        with limit:
            out = greedy_batch(model, torch.tensor([ids]), max_new=12)[0]
            tgt_in, tgt_out = shift_right(out, bos_id=cfg.bos_id, eos_id=cfg.eos_id, max_len=cfg.max_len)
            return out, teacher_forced(model, ids, tgt_in, tgt_out)

    alone = [translate(ids) for ids in sources]
    with ThreadPoolExecutor(max_workers=12) as pool:
        together = list(pool.map(translate, sources * 3))
    for (out, maps), (out_1, maps_1) in zip(together, alone * 3, strict=True):
        assert out == out_1
        for kind in ("enc_self", "dec_self", "cross"):
            np.testing.assert_array_equal(getattr(maps, kind), getattr(maps_1, kind))
        np.testing.assert_array_equal(maps.next_probs, maps_1.next_probs)


def test_a_slot_given_back_goes_to_the_longest_waiter():
    """First come, first served: a slot given back goes to the thread that has waited longest, never to one that
    arrives after it (a class arriving at once is drawn in the order it arrived; with a plain semaphore a newcomer can
    take the slot before the woken waiter does, and the waiter then queues again at the back)."""
    limit = CallLimit(1)
    order = []

    def waiter(name: str) -> None:
        with limit:
            order.append(name)

    with limit:
        order.append("first")
        threads = [threading.Thread(target=waiter, args=(f"w{i}",)) for i in range(3)]
        for t in threads:  # one by one, so each is at the door before the next
            t.start()
            time.sleep(0.1)
    with limit:  # arrives last, at the moment the slot is given back
        order.append("newcomer")
    for t in threads:
        t.join(5)
    assert order == ["first", "w0", "w1", "w2", "newcomer"]
