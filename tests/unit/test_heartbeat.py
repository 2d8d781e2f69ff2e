from datetime import timedelta

from django_jobs.worker.heartbeat import LeaseKeeper, Renewal
from tests.conftest import START

LEASE = 30.0
BEAT = 10.0


def keeper() -> LeaseKeeper:
    return LeaseKeeper.start(START, START + timedelta(seconds=LEASE), LEASE, BEAT)


def at(seconds: float):
    return START + timedelta(seconds=seconds)


def test_keeper_renews_every_beat():
    k = keeper()
    assert not k.is_due(at(9.9))
    assert k.is_due(at(10))
    assert k.record(Renewal.RENEWED, at(10), at(40))
    assert (k.expires_at, k.next_beat_at) == (at(40), at(20))
    assert not k.is_due(at(19)) and k.is_due(at(20))


def test_keeper_beat_is_at_most_a_third_of_the_lease():
    k = LeaseKeeper.start(START, at(30), 30, 25)
    assert k.beat_seconds == 10


def test_keeper_failed_renewal_is_retried_before_the_give_up_point():
    k = keeper()
    assert k.record(Renewal.FAILED, at(10))  # lease ends at 30, give-up at 20
    assert k.next_beat_at == at(15)  # halfway to the give-up point
    assert k.record(Renewal.FAILED, at(15))
    assert k.next_beat_at == at(17.5)
    assert k.check(at(19.9))
    assert k.record(Renewal.RENEWED, at(17.5), at(47.5))  # the database came back
    assert k.check(at(37.4)) and not k.gave_up


def test_keeper_retry_wait_is_a_beat_when_the_give_up_point_is_far():
    k = LeaseKeeper.start(START, at(90), 90, 10)  # give-up at 80
    assert k.record(Renewal.FAILED, at(10))
    assert k.next_beat_at == at(20)
    k2 = LeaseKeeper.start(START, at(30), 30, 10)
    k2.record(Renewal.RENEWED, at(10), at(40))
    k2.expires_at = at(27)  # give-up at 17
    assert k2.record(Renewal.FAILED, at(12)) and k2.next_beat_at == at(14.5)


def test_keeper_gives_up_one_beat_before_the_lease_lapses():
    k = keeper()
    k.record(Renewal.FAILED, at(10))
    assert k.check(at(19.99))
    assert not k.check(at(20))  # 30 s lease - 10 s beat: before anyone else can claim
    assert k.gave_up
    assert not k.record(Renewal.RENEWED, at(21), at(51))  # too late: stays given up
    assert not k.is_due(at(100))


def test_keeper_gives_up_at_once_when_refused():
    k = keeper()
    assert not k.record(Renewal.REFUSED, at(10))
    assert k.gave_up


def test_keeper_failure_at_the_deadline_gives_up():
    k = keeper()
    assert not k.record(Renewal.FAILED, at(20))


def test_keeper_a_renewal_may_take_until_the_give_up_point_not_the_lease_end():
    k = keeper()
    assert k.time_to_give_up(at(10)) == 10
    assert k.time_to_give_up(at(18)) == 2
    assert k.time_to_give_up(at(25)) == 0
