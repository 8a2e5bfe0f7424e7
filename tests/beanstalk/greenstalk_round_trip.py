"""A producer and a worker through every beanstalkd command, with greenstalk
used as its documentation shows, against the server at HOST PORT; then a
worker process that is killed while it holds a reservation, whose job comes
back. Prints "ok" and exits 0 when every check holds; any failed check raises.

Usage: greenstalk_round_trip.py HOST PORT TUBE
       greenstalk_round_trip.py HOST PORT TUBE --hold  (the worker that is killed)
"""

import os
import signal
import subprocess
import sys
import time

import greenstalk


def check(condition, what):
    if not condition:
        raise AssertionError(what)


def expect_error(error, call, *args):
    try:
        call(*args)
    except error:
        return
    raise AssertionError(f"{call.__name__} did not raise {error.__name__}")


def hold(address, tube):
    """Reserves one job, says which, and waits to be killed holding it."""
    with greenstalk.Client(address, watch=tube) as worker:
        job = worker.reserve(timeout=10)
        print(job.id, flush=True)
        time.sleep(3600)


def round_trip(address, tube):
    with greenstalk.Client(address, use=tube) as producer, greenstalk.Client(address, watch=tube) as worker:
        check(producer.using() == tube, "use")
        check(worker.watching() == [tube], "watch at connect, default ignored")
        check(worker.watch("default") == 2, "watch")
        check(worker.ignore("default") == 1, "ignore")
        expect_error(greenstalk.NotIgnoredError, worker.ignore, tube)

        normal = producer.put("normal", priority=1024, ttr=60)
        urgent = producer.put("urgent", priority=0, ttr=60)
        parked = producer.put("parked", delay=60)
        check(producer.peek(normal).body == "normal", "peek")
        check(producer.peek_ready().id == urgent, "peek-ready shows the most urgent")
        check(producer.peek_delayed().id == parked, "peek-delayed")
        stats = producer.stats_job(normal)
        check((stats["tube"], stats["state"], stats["pri"], stats["ttr"]) == (tube, "ready", 1024, 60), stats)

        job = worker.reserve(timeout=5)
        check((job.id, job.body) == (urgent, "urgent"), "the most urgent first")
        check(worker.stats_job(job)["state"] == "reserved", "reserved")
        worker.touch(job)
        worker.release(job, priority=0)
        job = worker.reserve(timeout=5)
        check(job.id == urgent, "released, reserved again")
        worker.bury(job, priority=0)
        check(producer.peek_buried().id == urgent, "peek-buried")
        check(producer.stats_tube(tube)["current-jobs-buried"] == 1, "stats-tube")
        check(producer.kick(10) == 1, "kick")
        job = worker.reserve(timeout=5)
        check(job.id == urgent, "kicked back")
        worker.delete(job)
        expect_error(greenstalk.NotFoundError, producer.peek, urgent)

        job = worker.reserve(timeout=5)
        check(job.id == normal, "then the normal one")
        worker.delete(job)
        expect_error(greenstalk.TimedOutError, worker.reserve, 0)
        producer.kick_job(parked)
        job = worker.reserve(timeout=5)
        check(job.id == parked, "kick-job")
        worker.delete(job.id)
        expect_error(greenstalk.NotFoundError, worker.reserve_job, parked)
        by_id = producer.put("by id", delay=60)
        job = worker.reserve_job(by_id)
        check((job.id, job.body) == (by_id, "by id"), "reserve-job")
        worker.delete(job)

        producer.pause_tube(tube, 1)
        paused_at = time.monotonic()
        held = producer.put("held")
        expect_error(greenstalk.TimedOutError, worker.reserve, 0)
        job = worker.reserve(timeout=10)
        check(job.id == held and time.monotonic() - paused_at >= 0.9, "pause-tube")
        worker.delete(job)

        check(tube in producer.tubes() and "default" in producer.tubes(), "list-tubes")
        stats = producer.stats()
        check(stats["cmd-put"] >= 4 and stats["current-connections"] >= 2, stats)

        # A worker process killed while it holds a reservation: the job comes back at once.
        dying = producer.put("dying", ttr=120)
        child = subprocess.Popen(
            [sys.executable, __file__, address[0], str(address[1]), tube, "--hold"],
            stdout=subprocess.PIPE,
            text=True,
        )
        held_id = int(child.stdout.readline())
        check(held_id == dying, "the dying worker holds the job")
        check(producer.stats_job(dying)["state"] == "reserved", "reserved by the dying worker")
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        killed_at = time.monotonic()
        job = worker.reserve(timeout=30)
        check(job.id == dying and time.monotonic() - killed_at < 10, "released on close, not after its ttr")
        worker.delete(job)


def main():
    host, port, tube = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if sys.argv[4:] == ["--hold"]:
        hold((host, port), tube)
        return
    round_trip((host, port), tube)
    print("ok")


if __name__ == "__main__":
    main()
