"""What one socket carrying contexts holds (web.fronts.shared.contexts): the ids it has closed are bounded, the most
recent kept, so a client sending ever new ids holds bounded memory."""

from __future__ import annotations

from web.fronts.shared.contexts import MAX_CLOSED_IDS, SocketContexts


def test_a_socket_remembers_its_last_closed_ids_only() -> None:
    contexts: SocketContexts[object] = SocketContexts()
    for index in range(3 * MAX_CLOSED_IDS):
        contexts.close_id(f"{index:0128d}")
    assert len(contexts.closed) == MAX_CLOSED_IDS
    newest, oldest_kept = f"{3 * MAX_CLOSED_IDS - 1:0128d}", f"{2 * MAX_CLOSED_IDS:0128d}"
    assert newest in contexts.closed and oldest_kept in contexts.closed
    assert f"{2 * MAX_CLOSED_IDS - 1:0128d}" not in contexts.closed
    contexts.close_id(oldest_kept)  # closed again: now the most recent, kept the longest
    contexts.close_id("one more")
    assert oldest_kept in contexts.closed and f"{2 * MAX_CLOSED_IDS + 1:0128d}" not in contexts.closed
