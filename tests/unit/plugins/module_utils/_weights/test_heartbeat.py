"""A long job's watch on the run that started it (module_utils/_weights/heartbeat.py)."""

import os

from ansible_collections.ds4.fleet.plugins.module_utils._weights.heartbeat import Heartbeat


class Clock:
    def __init__(self, now):
        self.now = now

    def __call__(self):
        return self.now


def test_a_job_lives_while_its_run_touches_the_file_and_ends_once_it_stops(tmp_path):
    path = tmp_path / "heartbeat"
    path.touch()
    os.utime(path, (1000, 1000))
    clock = Clock(1000)
    beat = Heartbeat(str(path), 300, clock)
    clock.now = 1299
    assert beat.alive()
    clock.now = 1300
    assert not beat.alive() and "300 s" in beat.why()
    os.utime(path, (1290, 1290))  # the run touched it again
    assert beat.alive()


def test_an_old_or_missing_file_counts_from_the_jobs_start(tmp_path):
    path = tmp_path / "heartbeat"
    path.touch()
    os.utime(path, (10, 10))  # an earlier run's
    clock = Clock(1000)
    beat = Heartbeat(str(path), 300, clock)
    assert beat.alive()
    path.unlink()
    clock.now = 1299
    assert beat.alive()
    clock.now = 1301
    assert not beat.alive()


def test_a_link_in_its_place_is_not_followed(tmp_path):
    fresh = tmp_path / "fresh"
    fresh.touch()
    path = tmp_path / "heartbeat"
    path.symlink_to(fresh)
    os.utime(path, (10, 10), follow_symlinks=False)
    clock = Clock(fresh.stat().st_mtime + 400)
    beat = Heartbeat(str(path), 300, clock)
    beat._started = 0  # a job long under way: only the file speaks for the run
    assert not beat.alive(), "the link's own time, not its target's"
