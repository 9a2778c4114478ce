"""The playback clock of a stream, an engine's measured speed, and the admission simulation: pure functions of the
times and sizes they are given."""

from __future__ import annotations

import math

import pytest

from gpu.playback import (
    HORIZON_S,
    MIN_OVERLAP_STEPS,
    EngineSpeed,
    Playback,
    Pool,
    StreamDemand,
    admission,
    simulate,
)

# --------------------------------------------------------------------------------------------------------------------
# Playback
# --------------------------------------------------------------------------------------------------------------------


def test_the_listener_clock_starts_at_the_first_piece_and_counts_no_underrun_while_audio_comes_in_time() -> None:
    clock = Playback()
    assert clock.in_hand(0.0) is None  # nothing yet: not started
    clock.delivered(4.0)
    assert clock.in_hand(0.5) == 4.0  # produced, waiting for the writer
    clock.sent(4.0, produced_at=0.5, now=1.0)
    assert clock.ends_at == 5.0 and clock.in_hand(2.0) == 3.0
    clock.delivered(8.0)
    clock.sent(8.0, produced_at=3.0, now=3.0)  # before the first piece ran out
    assert clock.ends_at == 13.0 and clock.underrun_s == 0 and clock.underruns == 0


def test_audio_late_from_the_gpu_thread_while_the_writer_asks_is_an_underrun() -> None:
    clock = Playback()
    clock.delivered(2.0)
    clock.sent(2.0, produced_at=0.0, now=0.0)
    clock.ask(0.1)  # sent: the writer asks for more
    assert clock.in_hand(3.0) == -1.0 and clock.reader_lag(3.0) == 0.0  # dry for a second, and not the reader's doing
    clock.delivered(2.0)
    stall = clock.sent(2.0, produced_at=3.5, now=3.5)
    assert stall == 1.5 and clock.underrun_s == 1.5 and clock.underruns == 1
    assert clock.ends_at == 5.5  # the listener resumes where it stalled


def test_a_writer_still_sending_when_its_listener_would_have_run_out_has_a_reader_behind_real_time() -> None:
    clock = Playback()
    clock.delivered(2.0)
    clock.sent(2.0, produced_at=0.0, now=0.0)  # the writer is busy sending it: no ask
    assert clock.reader_lag(1.5) == 0.0 and clock.idle_for(1.5) == 1.5
    assert clock.reader_lag(12.0) == 10.0  # a real-time listener would have finished it 10 s ago
    assert clock.idle_for(12.0) == 12.0
    clock.delivered(2.0)  # produced in time, waiting for the writer
    assert clock.in_hand(12.0) == 2.0  # the audio is there: not ours to hurry
    clock.ask(20.0)  # sent at last
    assert clock.reader_lag(20.0) == 0.0 and clock.idle_for(20.0) == 0.0
    assert clock.sent(2.0, produced_at=1.0, now=20.0) == 0.0
    clock.ask(20.5)
    clock.delivered(2.0)
    assert clock.sent(2.0, produced_at=21.0, now=21.0) == 0.0  # asked at 20.5, the listener had until 22
    assert clock.sent(2.0, produced_at=40.0, now=40.0) == 0.0  # never asked: the reader's delay, not a stall
    assert clock.underrun_s == 0


# --------------------------------------------------------------------------------------------------------------------
# EngineSpeed
# --------------------------------------------------------------------------------------------------------------------


def test_engine_speed_is_the_median_of_recent_steps_so_a_step_with_a_model_load_does_not_skew_it() -> None:
    speed = EngineSpeed(window=5)
    assert not speed.known
    speed.learn(100, 2.0, 6.0)
    speed.learn(100, 30.0, 6.0)  # this step also loaded the model
    speed.learn(50, 1.0, 3.0)
    assert speed.known
    assert speed.gpu_s_per_char == pytest.approx(0.02) and speed.audio_s_per_char == pytest.approx(0.06)
    assert speed.real_time_factor == pytest.approx(1 / 3)
    speed.learn(0, 1.0, 1.0)  # nothing to learn from: ignored
    speed.learn(10, 1.0, 0.0)
    for _ in range(5):
        speed.learn(100, 1.0, 6.0)  # the engine got faster: the window forgets the old steps
    assert speed.gpu_s_per_char == pytest.approx(0.01)


# --------------------------------------------------------------------------------------------------------------------
# simulate / admission
# --------------------------------------------------------------------------------------------------------------------


def steps(count: int, gpu: float, audio: float) -> list[tuple[float, float]]:
    return [(gpu, audio)] * count


def test_streams_not_started_go_first_in_order_of_arrival_then_the_one_closest_to_running_dry() -> None:
    running = StreamDemand(1, steps(3, 1.0, 5.0), in_hand=1.5)
    later = StreamDemand(2, steps(1, 0.5, 2.0), None, arrival=2.0)
    earlier = StreamDemand(3, steps(1, 0.5, 2.0), None, arrival=1.0)
    result = simulate([running, later, earlier])
    assert result.start_wait == {3: 0.0, 2: 0.5}
    # first steps go first even so: with 1.5 s in hand it needed its next step to start by 0.5 s; it runs dry for
    # 0.5 s (admission is what keeps this from happening to admitted streams)
    assert result.underrun[1] == 0.5
    assert result.finish[2] == 1.0 and result.finish[3] == 0.5


def test_a_stream_that_cannot_be_served_in_time_runs_dry_in_the_simulation() -> None:
    result = simulate([StreamDemand(1, steps(5, 2.0, 1.0), in_hand=0.0)])
    # each second of audio costs two: it falls a second further behind with every step
    assert result.underrun[1] == pytest.approx(2 + 1 + 1 + 1 + 1)
    assert result.demand_after == 0.0 and result.finish[1] == 10.0 and result.state == []


def test_the_step_under_way_delays_everyone_and_belongs_to_its_stream() -> None:
    mine = StreamDemand(1, steps(2, 1.0, 4.0), None)
    other = StreamDemand(2, steps(1, 1.0, 4.0), in_hand=0.5)
    result = simulate([mine, other], under_way=[(0.8, 1)])
    assert result.start_wait[1] == 0.0  # its first step is the one under way
    assert result.underrun[2] == pytest.approx(0.3 + 1.0)  # waited for the step under way, then for its own
    assert result.finish[1] == pytest.approx(2.8)


def test_admission_refuses_what_would_make_an_admitted_stream_run_dry() -> None:
    admitted = [StreamDemand(1, steps(20, 1.0, 2.0), in_hand=1.2)]  # needs half the thread, 1.2 s ahead
    candidate = StreamDemand(2, steps(20, 1.0, 2.0), None, arrival=1.0)
    refusal = admission(admitted, candidate, max_start_wait=5.0)
    assert refusal is not None and "admitted stream" in refusal.reason
    assert refusal.retry_after > 0
    ahead = [StreamDemand(1, steps(20, 1.0, 2.0), in_hand=10.0)]  # far ahead: it can absorb the newcomer's start
    assert admission(ahead, candidate, max_start_wait=5.0) is None


def test_admission_refuses_a_third_stream_that_would_need_more_than_the_whole_thread() -> None:
    long = steps(200, 0.4, 1.0)  # 0.4 GPU seconds per audio second, far past the horizon
    admitted = [StreamDemand(1, long, in_hand=30.0), StreamDemand(2, long, in_hand=30.0)]
    refusal = admission(admitted, StreamDemand(3, long, None, arrival=9.0), max_start_wait=5.0)
    assert refusal is not None and "1.20x the GPU thread" in refusal.reason
    # nothing admitted finishes within the horizon; each has ~125 s of audio left then, made at the latest at the
    # pace of its playback (the GPU thread could make it in 100 s, were the streams allowed that far ahead)
    assert 150.0 < refusal.retry_after < 190.0
    short = StreamDemand(3, steps(2, 0.4, 1.0), None, arrival=9.0)  # short: no lasting demand, no stall
    assert admission(admitted, short, max_start_wait=5.0) is None


def test_admission_bounds_the_wait_for_a_first_step_behind_other_newcomers() -> None:
    newcomers = [StreamDemand(i, steps(1, 1.0, 10.0), None, arrival=float(i)) for i in range(1, 5)]
    candidate = StreamDemand(9, steps(1, 1.0, 10.0), None, arrival=9.0)
    refusal = admission(newcomers, candidate, under_way=[(2.0, None)], max_start_wait=3.5)
    assert refusal is not None and "wait 4.0 s" in refusal.reason  # the step under way is not counted
    assert refusal.retry_after >= 0.5
    assert admission(newcomers, candidate, under_way=[(2.0, None)], max_start_wait=4.0) is None


def test_a_stream_too_slow_even_alone_is_still_admitted_when_nothing_else_streams() -> None:
    slow = StreamDemand(1, steps(10, 3.0, 1.0), None)
    assert admission([], slow, max_start_wait=5.0) is None
    endless = StreamDemand(1, steps(1000, 1.5, 1.0), None)  # still needs 1.5x the thread at the horizon
    assert admission([], endless, max_start_wait=5.0) is None
    # next to another stream it would always be the closest to running dry, and starve it
    finishing = [StreamDemand(2, steps(3, 0.5, 1.0), in_hand=30.0)]
    refusal = admission(finishing, endless, max_start_wait=5.0)
    assert refusal is not None and refusal.reason == "1 admitted stream(s) would run dry"


def test_retry_after_is_the_first_instant_at_which_the_stream_would_be_admitted() -> None:
    admitted = [StreamDemand(1, steps(8, 1.0, 2.0), in_hand=3.0), StreamDemand(2, steps(40, 1.0, 2.0), in_hand=3.0)]
    candidate = StreamDemand(3, steps(40, 1.0, 2.0), None, arrival=9.0)
    refusal = admission(admitted, candidate, max_start_wait=5.0)
    assert refusal is not None
    # tried again against the admitted streams as they will be then: refused just before, admitted from then on
    before = simulate(admitted, until=refusal.retry_after / 2)
    after = simulate(admitted, until=refusal.retry_after)
    assert admission(before.state, candidate, max_start_wait=5.0) is not None
    assert admission(after.state, candidate, max_start_wait=5.0) is None
    assert refusal.retry_after <= after.finish[1] + 1.0  # no later than the short stream's end


def test_beyond_the_horizon_a_stream_finishes_after_its_share_of_the_thread() -> None:
    long = steps(1000, 0.3, 1.0)
    result = simulate([StreamDemand(1, long, in_hand=5.0), StreamDemand(2, long, in_hand=5.0)])
    assert result.at >= HORIZON_S and result.demand_after == pytest.approx(0.6)
    assert [s.id for s in result.state] == [1, 2] and result.state[0].in_hand is not None
    assert HORIZON_S < result.finish[1] < HORIZON_S + 1000  # made at the pace of playback at worst
    assert math.isclose(result.finish[1], result.finish[2], abs_tol=1.0)


def test_a_listener_who_ran_dry_while_a_live_request_waited_for_text_starts_again_without_an_underrun() -> None:
    clock = Playback()
    clock.delivered(1.0)
    clock.sent(1.0, produced_at=0.0, now=0.0)
    clock.ask(0.1)
    clock.delivered(1.0)
    # Its client wrote nothing until 9 s: the audio that comes after is a new start, not a stall.
    assert clock.sent(1.0, produced_at=9.5, now=9.5, input_waited_at=9.0) == 0.0
    assert clock.underrun_s == 0 and clock.ends_at == 10.5
    clock.ask(10.0)
    clock.delivered(1.0)
    assert clock.sent(1.0, produced_at=11.0, now=11.0, input_waited_at=9.0) == 0.5  # late from the GPU: counted


def test_an_item_without_audio_ends_no_stall() -> None:
    clock = Playback()
    clock.delivered(1.0)
    clock.sent(1.0, produced_at=0.0, now=0.0)
    clock.ask(0.5)
    # The end of the response (or word timings) comes long after the listener ran out: nothing was waited for.
    assert clock.sent(0.0, produced_at=5.0, now=5.0) == 0.0
    assert clock.underrun_s == 0 and clock.underruns == 0 and clock.ends_at == 1.0


def test_two_lanes_serve_two_streams_at_once_each_step_as_much_slower_as_measured() -> None:
    pool = Pool((1.0, 1.5))
    assert pool.lanes == 2 and pool.capacity == pytest.approx(2 / 1.5)
    first = StreamDemand(1, steps(2, 1.0, 5.0), in_hand=10.0)
    second = StreamDemand(2, steps(2, 1.0, 5.0), in_hand=10.0)
    result = simulate([first, second], pool=pool)
    # Steps end at 1.0 (alone when it began) and 1.5 (beside it); each second step begins beside the other's.
    assert result.finish == {1: pytest.approx(2.5), 2: pytest.approx(3.0)} and result.underrun == {1: 0.0, 2: 0.0}
    assert simulate([first, second]).finish[2] == pytest.approx(4.0)  # one lane: one step after the other


def test_a_first_step_takes_the_first_lane_free_and_nothing_starts_beside_it() -> None:
    playing = [StreamDemand(i, steps(3, 1.0, 5.0), in_hand=10.0) for i in (1, 2)]
    newcomer = StreamDemand(3, steps(2, 1.0, 5.0), None, arrival=9.0)
    result = simulate([*playing, newcomer], under_way=[(0.4, 1), (0.9, 2)], pool=Pool((1.0, 1.5)))
    assert result.start_wait[3] == pytest.approx(0.4)  # once the first step under way has ended
    # With all the threads it takes its time alone, 1.0, and nothing starts beside it once the other lane is free;
    # its second step starts first again, a playing stream's beside it.
    assert result.finish[3] == pytest.approx(0.4 + 1.0 + 1.0) and result.underrun == {1: 0.0, 2: 0.0, 3: 0.0}
    # A first step under way beside another: once that one ends, nothing starts beside the first step.
    beside = simulate([playing[0], newcomer], under_way=[(1.0, 3), (0.3, 1)], pool=Pool((1.0, 1.5)))
    assert beside.finish[3] == pytest.approx(2.0)  # its second step at 1.0, alone again (stream 1 is far ahead)
    assert beside.finish[1] == pytest.approx(1.0 + 1.5 + 1.0)  # its next steps begin at 1.0, beside the newcomer's


def test_a_stream_ahead_takes_the_short_steps_its_text_allows_in_the_simulation() -> None:
    quarters: list[tuple[float, ...]] = [(0.25, 0.25, 0.25, 0.25)]  # its step can be cut into four short ones
    low = StreamDemand(1, steps(1, 2.0, 6.0), in_hand=1.2, splits=quarters)  # its whole step: dry for 0.8 s
    assert simulate([low]).underrun[1] == pytest.approx(0.8)
    cutting = Pool(short_lead=1.0)
    assert simulate([low], pool=cutting).underrun[1] == 0.0  # 0.5 s steps: its audio comes in time
    uncut = StreamDemand(1, steps(1, 2.0, 6.0), in_hand=1.2)  # one clause: nowhere to cut
    assert simulate([uncut], pool=cutting).underrun[1] == pytest.approx(0.8)
    starved = StreamDemand(1, steps(1, 2.0, 6.0), in_hand=0.8, splits=quarters)  # below the lead: its whole step
    assert simulate([starved], pool=cutting).underrun[1] == pytest.approx(1.2)
    beside = simulate([low], under_way=[(9.0, None)], pool=Pool((1.0, 2.0), short_lead=1.0))
    assert beside.finish[1] == pytest.approx(4 * 0.5 * 2.0)  # each quarter twice as long beside the other step


def test_overlapped_steps_measure_the_slowdown_once_there_are_enough_of_them() -> None:
    speed = EngineSpeed()
    for _ in range(4):
        speed.learn(100, 2.0, 6.6)
    assert speed.slowdown(3) == (1.0, 2.0, 3.0)  # nothing measured beside others: nothing gained
    for _ in range(MIN_OVERLAP_STEPS):
        speed.learn(100, 3.2, 6.6, overlap=1.8)  # ran beside another most of the time: counted as two at once
    assert speed.slowdown(3) == (1.0, pytest.approx(1.6), 3.0)
    assert speed.gpu_s_per_char == pytest.approx(0.02) and speed.audio_s_per_char == pytest.approx(0.066)
    fast = EngineSpeed()
    fast.learn(100, 2.0, 6.6)
    for _ in range(MIN_OVERLAP_STEPS):
        fast.learn(100, 1.0, 6.6, overlap=2.0)  # faster beside another than alone: noise, not a gain past 2x
    assert fast.slowdown(2) == (1.0, 1.0)
