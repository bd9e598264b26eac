"""Python objects between emulated ranks: a value from a rank that is not running fails at once."""

import time

import pytest

from emulator.distributed.objects import Exchange, ObjectExchangeTimeout


def test_a_value_from_a_rank_that_is_not_running_fails_at_once_and_names_it(tmp_path):
    receiver = Exchange(tmp_path, rank=0, timeout_s=60, peers=frozenset({0, 7}))
    t0 = time.monotonic()
    with pytest.raises(ObjectExchangeTimeout, match=r"from rank 1 \(p2p\.pp\.1-0\); rank 1 does not run in this batch"):
        receiver.get("p2p.pp.1-0", from_rank=1)
    assert time.monotonic() - t0 < 5


def test_a_value_a_rank_sent_before_is_read_even_when_that_rank_is_not_running_now(tmp_path):
    Exchange(tmp_path, rank=1, timeout_s=1).put("p2p.pp.1-0", ["shape"])
    receiver = Exchange(tmp_path, rank=0, timeout_s=60, peers=frozenset({0}))
    assert receiver.get("p2p.pp.1-0", from_rank=1) == ["shape"]


def test_a_running_peer_is_waited_for_until_the_timeout(tmp_path):
    receiver = Exchange(tmp_path, rank=0, timeout_s=0.3, peers=frozenset({0, 1}))
    t0 = time.monotonic()
    with pytest.raises(ObjectExchangeTimeout, match="did not send it within"):
        receiver.get("p2p.pp.1-0", from_rank=1)
    assert time.monotonic() - t0 >= 0.3
