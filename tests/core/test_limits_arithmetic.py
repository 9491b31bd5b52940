"""core/limits' arithmetic held directly: how fast a bucket refills and how long a wait it names, where a budget
period ends, how a reset time is written, and what other servers' admissions take from this one's buckets."""

from __future__ import annotations

import calendar

from llmgw.core.limits import Bucket, KeyCounters, duration, period_end, period_start, taken_elsewhere


def test_a_bucket_refills_its_capacity_over_a_minute_and_no_further() -> None:
    b = Bucket(capacity=60, level=0, at=100.0)
    b.refill(130.0)
    assert (b.level, b.at) == (30.0, 130.0)
    b.refill(1000.0)
    assert b.level == 60


def test_a_bucket_names_the_seconds_until_an_amount_is_there_and_zero_when_it_is() -> None:
    assert Bucket(capacity=60, level=60, at=0.0).wait_for(10) == 0.0
    assert Bucket(capacity=60, level=0, at=0.0).wait_for(30) == 30.0
    assert Bucket(capacity=120, level=-120, at=0.0).full_in() == 120.0


def test_a_day_ends_at_the_next_utc_midnight_and_a_month_at_the_next_months_first() -> None:
    mid_june = calendar.timegm((2026, 6, 15, 13, 30, 0))
    assert period_end("day", mid_june) == calendar.timegm((2026, 6, 16, 0, 0, 0))
    assert period_end("month", mid_june) == calendar.timegm((2026, 7, 1, 0, 0, 0))
    december = calendar.timegm((2026, 12, 31, 23, 59, 59))
    assert period_end("month", december) == calendar.timegm((2027, 1, 1, 0, 0, 0))
    assert period_end("total", mid_june) is None
    assert period_start("day", mid_june) == calendar.timegm((2026, 6, 15, 0, 0, 0))


def test_a_reset_time_under_a_second_is_in_milliseconds_and_never_below_zero() -> None:
    assert [duration(s) for s in (0.0, -3.0, 0.0004, 0.25)] == ["0ms", "0ms", "1ms", "250ms"]
    assert [duration(s) for s in (1.0, 61.2, 3723.0)] == ["1s", "1m2s", "1h2m3s"]


def test_what_other_servers_took_comes_out_of_these_buckets_within_one_capacity_below_empty() -> None:
    c = KeyCounters(requests=Bucket(10, 10, 0.0), tokens=Bucket(100, 40, 0.0))
    taken_elsewhere(c, 3, 50, 6.0)  # 6 s later: one request and 10 tokens back in first
    assert c.requests is not None and c.tokens is not None
    assert (c.requests.level, c.tokens.level) == (7.0, 0.0) and c.tokens.at == 6.0
    taken_elsewhere(c, 100, 1000, 6.0)
    assert (c.requests.level, c.tokens.level) == (-10.0, -100.0)  # no lower than one capacity below empty
    taken_elsewhere(c, 0, -1000, 6.0)  # given back: up to full and no further; no requests: left as they were
    assert (c.requests.level, c.tokens.level) == (-10.0, 100.0)


def test_what_other_servers_took_touches_no_limit_the_key_does_not_have() -> None:
    c = KeyCounters(requests=None, tokens=Bucket(100, 100, 0.0))
    taken_elsewhere(c, 5, 0, 1.0)
    assert c.requests is None and c.tokens is not None and (c.tokens.level, c.tokens.at) == (100, 0.0)
