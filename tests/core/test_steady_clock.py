"""SystemClock.now() follows the wall clock, but a step of it only at 1% of the time elapsed: durations between
llmgw's own timestamps stay true within 1% whatever is done to the wall clock (reliability check 14)."""

from __future__ import annotations

from llmgw.core.clock import SLEW, SystemClock


class Source:
    def __init__(self) -> None:
        self.wall = 1_800_000_000.0
        self.mono = 100.0

    def tick(self, seconds: float) -> None:
        self.wall += seconds
        self.mono += seconds


def clock(src: Source) -> SystemClock:
    return SystemClock(wall=lambda: src.wall, mono=lambda: src.mono, shared=False)


def test_it_is_the_wall_clock_while_the_wall_clock_behaves() -> None:
    src = Source()
    c = clock(src)
    for _ in range(100):
        src.tick(0.37)
        assert c.now() == src.wall


def test_an_hour_forward_or_back_moves_it_by_at_most_one_percent_of_the_time_elapsed() -> None:
    for step in (3600.0, -3600.0):
        src = Source()
        c = clock(src)
        before = c.now()
        src.wall += step  # the wall clock set by hand
        src.tick(10.0)
        after = c.now()
        assert 10.0 * (1 - SLEW) - 1e-9 <= after - before <= 10.0 * (1 + SLEW) + 1e-9
        # and it catches up, at that rate, never backwards
        last = after
        for _ in range(20_000):
            src.tick(60.0)
            t = c.now()
            assert t >= last
            last = t
        assert abs(last - src.wall) < 1e-6  # 20,000 minutes: more than the 100 hours an hour's step takes


def test_it_never_goes_backwards_even_when_the_monotonic_source_stalls() -> None:
    src = Source()
    c = clock(src)
    first = c.now()
    src.wall -= 5.0  # the wall clock steps back while no monotonic time passes
    assert c.now() == first
