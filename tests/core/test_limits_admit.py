"""core/limits' admission decision held at its edges: every refusal is a refusal (not only the right code), the
counts of other servers add in, a request exactly at a limit passes, refusals carry their words and headers, and
settling gives back exactly what was not used."""

from __future__ import annotations

import calendar
import time

from llmgw.core import limits as key_limits
from llmgw.core.limits import Bucket, KeyCounters, KeyLimits, LimitRefusal

T0 = float(calendar.timegm((2026, 12, 31, 23, 0, 0)))  # an hour before a new day, month and year


def test_a_key_has_limits_when_any_one_is_set() -> None:
    assert not KeyLimits().any()
    for one in ({"rpm": 1}, {"tpm": 1}, {"concurrency": 1}, {"budget": 1}):
        assert KeyLimits.model_validate(one).any(), one


def test_each_refusal_admits_nothing_says_why_and_carries_the_rate_headers() -> None:
    cases = [
        (KeyLimits(concurrency=2, rpm=10), KeyCounters(in_flight=1, in_flight_elsewhere=1), 5,
         LimitRefusal.Rate, "2 requests in flight, the limit is 2"),
        (KeyLimits(rpm=1, tpm=100), KeyCounters(requests=Bucket(1, 0, 0.0)), 5,
         LimitRefusal.Rate, "requests per minute: limit 1"),
        (KeyLimits(tpm=100, rpm=10), KeyCounters(), 101, LimitRefusal.TooLarge,
         "this request may cost up to 101 tokens, more than the 100 tokens per minute allowed: send less or a "
         "lower max_tokens"),
        (KeyLimits(tpm=100, rpm=10), KeyCounters(tokens=Bucket(100, 40, 0.0)), 41, LimitRefusal.Rate,
         "tokens per minute: limit 100, this request may cost up to 41"),
    ]
    for lim, c, cost, refusal, words in cases:
        d = key_limits.admit(c, lim, cost, 0, T0, 0.0)
        assert (d.admitted, d.refusal, d.message) == (False, refusal, words)
        assert dict(d.headers)["x-ratelimit-limit-requests"] == str(lim.rpm), d.headers
        assert c.in_flight + c.in_flight_elsewhere <= 2 and c.reserved == 0


def test_a_request_exactly_at_a_limit_is_admitted() -> None:
    c = KeyCounters(tokens=Bucket(100, 41, 0.0))
    assert key_limits.admit(c, KeyLimits(tpm=100), 41, 0, T0, 0.0).admitted  # the level it needs, no more
    assert key_limits.admit(KeyCounters(), KeyLimits(tpm=100), 100, 0, T0, 0.0).admitted  # a whole minute's tokens


def test_admitted_requests_count_in_flight_and_reserved() -> None:
    c, lim = KeyCounters(), KeyLimits(concurrency=5)
    for _ in range(3):
        assert key_limits.admit(c, lim, 7, 0, T0, 0.0).admitted
    assert (c.in_flight, c.reserved) == (3, 21)


def test_a_spent_budget_counts_what_other_servers_hold_and_says_what_is_left() -> None:
    c, lim = KeyCounters(reserved=100, reserved_elsewhere=200), KeyLimits(budget=1000, budget_period="day", rpm=9)
    d = key_limits.admit(c, lim, 500, 250, T0, 0.0)
    assert (d.admitted, d.refusal) == (False, LimitRefusal.Quota)
    assert d.message == ("token budget spent: 550 of 1000 tokens this day are used or held by requests in flight, "
                         "450 left, and this request may cost up to 500; it renews in 1h0m0s")
    assert dict(d.headers)["x-ratelimit-limit-requests"] == "9"
    over = key_limits.admit(KeyCounters(reserved=600), KeyLimits(budget=1000, budget_period="total"), 1, 500, T0, 0.0)
    assert over.message == ("token budget spent: 1100 of 1000 tokens this total are used or held by requests in "
                            "flight, 0 left, and this request may cost up to 1")  # no renewal: never


def test_rate_headers_cover_requests_and_tokens() -> None:
    c = KeyCounters()
    d = key_limits.admit(c, KeyLimits(rpm=10, tpm=100), 30, 0, T0, 0.0)
    assert dict(d.headers) == {
        "x-ratelimit-limit-requests": "10", "x-ratelimit-remaining-requests": "9", "x-ratelimit-reset-requests": "6s",
        "x-ratelimit-limit-tokens": "100", "x-ratelimit-remaining-tokens": "70", "x-ratelimit-reset-tokens": "18s"}


def test_settling_gives_back_only_what_was_not_used_and_ends_one_request() -> None:
    c = KeyCounters(tokens=Bucket(1000, 0, 0.0), in_flight=2, reserved=300)
    key_limits.settle(c, 100, 100, 0.0)  # used all it reserved: nothing back
    assert c.tokens is not None and (c.tokens.level, c.in_flight, c.reserved) == (0, 1, 200)
    key_limits.settle(c, 100, 250, 0.0)  # used more than reserved (an alarm elsewhere): nothing back, nothing taken
    assert c.tokens.level == 0
    c = KeyCounters(tokens=Bucket(1000, 0, 0.0), in_flight=1, reserved=100)
    key_limits.settle(c, 100, -5, 0.0)  # a negative report counts as none used
    assert c.tokens is not None and (c.tokens.level, c.in_flight, c.reserved) == (100, 0, 0)


def test_the_month_of_every_day_agrees_with_the_calendar_across_era_and_century_edges() -> None:
    for first, last in ((1999, 2001), (2099, 2101), (2399, 2401)):
        day = calendar.timegm((first, 12, 1, 12, 0, 0))
        end = calendar.timegm((last, 3, 2, 0, 0, 0))
        while day < end:
            t = time.gmtime(day)
            assert key_limits.period_start("month", day) == calendar.timegm((t.tm_year, t.tm_mon, 1, 0, 0, 0)), t
            day += 86400
