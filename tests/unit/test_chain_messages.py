"""Work messages survive their trip through the queue, old ones included."""

from __future__ import annotations

import json

from batchgw.domain.chains import ChainMessage, RequestMessage, decode


def test_a_chain_message_comes_back_as_sent_with_its_generation_and_full_streak() -> None:
    for message in (
        ChainMessage("batch_1", 2, 7, 16),
        ChainMessage("batch_1", 2, 7, 16, generation=3, full=5),
        RequestMessage("batch_1", 9),
    ):
        assert decode(message.encode()) == message


def test_a_message_sent_before_the_full_streak_existed_reads_as_none_in_a_row() -> None:
    assert "f" not in json.loads(ChainMessage("batch_1", 0, 0, 4).encode())
    assert decode('{"b":"batch_1","c":0,"i":4,"w":4,"g":2}') == ChainMessage("batch_1", 0, 4, 4, generation=2)
