"""The admission rule over counters, by a fake clock: each limit, the reservation, settling, periods, headers."""

from __future__ import annotations

import calendar

from llmgw.core import limits as key_limits
from llmgw.core.limits import KeyCounters, KeyLimits, LimitRefusal, Spent

T0 = float(calendar.timegm((2026, 12, 31, 23, 0, 0)))  # an hour before a new day, month and year


def test_requests_per_minute_refill_continuously_and_say_when() -> None:
    c, lim = KeyCounters(), KeyLimits(rpm=2)
    assert key_limits.admit(c, lim, 10, 0, T0, 0.0).admitted
    ok = key_limits.admit(c, lim, 10, 0, T0, 0.0)
    assert ok.admitted and dict(ok.headers)["x-ratelimit-remaining-requests"] == "0"
    no = key_limits.admit(c, lim, 10, 0, T0, 0.0)
    assert (no.admitted, no.refusal, no.retry_after) == (False, LimitRefusal.Rate, 30.0)  # one request every 30 s
    assert dict(no.headers) == {"x-ratelimit-limit-requests": "2", "x-ratelimit-remaining-requests": "0",
                                "x-ratelimit-reset-requests": "1m0s"}
    assert key_limits.admit(c, lim, 10, 0, T0 + 30, 30.0).admitted


def test_tokens_per_minute_count_the_reservation_and_give_back_what_was_not_used() -> None:
    c, lim = KeyCounters(), KeyLimits(tpm=1000)
    assert key_limits.admit(c, lim, 600, 0, T0, 0.0).admitted
    no = key_limits.admit(c, lim, 600, 0, T0, 0.0)
    assert no.refusal == LimitRefusal.Rate and no.retry_after == 12.0  # 200 more tokens at 1000 a minute
    key_limits.settle(c, 600, 100, 0.0)  # it used 100 of its 600
    assert key_limits.admit(c, lim, 600, 0, T0, 0.0).admitted
    big = key_limits.admit(c, lim, 1001, 0, T0, 0.0)
    assert big.refusal == LimitRefusal.TooLarge and big.retry_after is None  # never admissible: retrying cannot help


def test_concurrency_counts_requests_in_flight_until_they_settle() -> None:
    c, lim = KeyCounters(), KeyLimits(concurrency=1)
    assert key_limits.admit(c, lim, 5, 0, T0, 0.0).admitted
    no = key_limits.admit(c, lim, 5, 0, T0, 0.0)
    assert no.refusal == LimitRefusal.Rate and no.retry_after == 1.0
    key_limits.settle(c, 5, 5, 0.0)
    assert key_limits.admit(c, lim, 5, 0, T0, 0.0).admitted


def test_a_budget_holds_reservations_so_concurrent_requests_cannot_overspend_it() -> None:
    c, lim, spent = KeyCounters(), KeyLimits(budget=1000, budget_period="day"), Spent()
    admitted = [key_limits.admit(c, lim, 300, 0, T0, 0.0).admitted for _ in range(5)]
    assert admitted == [True, True, True, False, False]  # 900 held: a fourth could spend 1,200
    no = key_limits.admit(c, lim, 300, 0, T0, 0.0)
    assert no.refusal == LimitRefusal.Quota and no.retry_after is None
    assert "900 of 1000 tokens this day" in no.message and "renews in 1h0m0s" in no.message
    for _ in range(3):
        key_limits.settle(c, 300, 250, 0.0)
        spent.charge(250, T0)
    assert spent.of("day", T0) == 750 and c.reserved == 0
    assert key_limits.admit(c, lim, 250, spent.of("day", T0), T0, 0.0).admitted
    assert not key_limits.admit(c, lim, 1, spent.of("day", T0), T0, 0.0).admitted
    assert spent.of("day", T0 + 3600) == 0  # a new day: spent starts again
    assert key_limits.admit(c, lim, 0, spent.of("day", T0 + 3600), T0 + 3600, 0.0).admitted


def test_spent_is_kept_for_every_period_and_charged_to_the_one_that_admitted() -> None:
    """A request admitted before midnight and ending after it counts in the day (and month, year) that admitted
    it; what was spent counts in the day, the month and in all at once, whatever period a budget uses now."""
    s = Spent()
    s.charge(100, T0 - 86400)  # yesterday, the same month
    s.charge(40, T0)
    s.charge(5, T0 + 7200)  # admitted after midnight: a new day, month, year
    s.charge(7, T0 + 10)  # admitted before midnight, ended after: a period past, not counted in the new one
    assert (s.of("day", T0 + 7200), s.of("month", T0 + 7200), s.of("total", T0 + 7200)) == (5, 5, 152)
    assert (s.of("day", T0), s.of("month", T0)) == (0, 0)  # the past day is gone once a new one began
    t = Spent()
    t.charge(40, T0)
    t.at_least("day", key_limits.period_start("day", T0), 30)  # the store knows less than was counted: kept
    t.at_least("month", key_limits.period_start("month", T0), 90)  # the store knows more: taken
    assert (t.of("day", T0), t.of("month", T0), t.of("total", T0)) == (40, 90, 40)


def test_periods_are_utc_days_and_months_and_total_never_renews() -> None:
    assert key_limits.period_start("day", T0) == float(calendar.timegm((2026, 12, 31, 0, 0, 0)))
    assert key_limits.period_start("month", T0) == float(calendar.timegm((2026, 12, 1, 0, 0, 0)))
    assert key_limits.period_end("month", T0) == float(calendar.timegm((2027, 1, 1, 0, 0, 0)))
    assert key_limits.period_start("total", T0) == 0.0 and key_limits.period_end("total", T0) is None


def test_a_refusal_changes_nothing() -> None:
    c, lim = KeyCounters(), KeyLimits(rpm=5, tpm=100, concurrency=3, budget=50)
    before = (c.in_flight, c.reserved)
    assert key_limits.admit(c, lim, 60, 0, T0, 0.0).refusal == LimitRefusal.Quota
    assert (c.in_flight, c.reserved) == before
    assert c.requests is not None and c.requests.level == 5 and c.tokens is not None and c.tokens.level == 100


def test_month_starts_agree_with_the_calendar_over_four_centuries() -> None:
    for year in range(1970, 2400, 7):
        for month in range(1, 13):
            start = float(calendar.timegm((year, month, 1, 0, 0, 0)))
            assert key_limits.period_start("month", start) == start
            assert key_limits.period_start("month", start + 27 * 86400 + 3600) == start
            assert key_limits.period_start("month", start - 1) == float(calendar.timegm(
                (year - (month == 1), 12 if month == 1 else month - 1, 1, 0, 0, 0)))


def test_reservations_and_durations() -> None:
    assert key_limits.reservation(120, 50) == 170 and key_limits.reservation(0, 0) == 1
    assert [key_limits.duration(s) for s in (0.25, 1, 61, 3723)] == ["250ms", "1s", "1m1s", "1h2m3s"]


def test_limits_are_whole_numbers_as_given_not_coerced() -> None:
    """true, "5" and 1.0 are not limits: a config or a PATCH that says them is refused, not read as 1 or 5."""
    import pytest
    from pydantic import ValidationError

    for bad in ({"rpm": True}, {"tpm": "5"}, {"budget": 1.0}, {"concurrency": "2"}):
        with pytest.raises(ValidationError):
            KeyLimits.model_validate(bad)
        with pytest.raises(ValidationError):
            KeyLimits.model_validate_json(__import__("json").dumps(bad))
    assert KeyLimits.model_validate_json('{"rpm": 5, "budget": 10, "budget_period": "day"}').rpm == 5
