"""Where the demo's replays run: a second query of the live job on local[2], a process of its own on a cluster."""

from __future__ import annotations

from pathlib import Path

from demo.lineup import Lineup

LOCAL = Lineup(Path("/run"), "127.0.0.1:9092", "http://127.0.0.1:8083", partitions=2, batch=150)
CLUSTER = Lineup(Path("/run"), "127.0.0.1:9092", "http://127.0.0.1:8083", partitions=2, batch=150,
                 master="spark://127.0.0.1:7077", shared=Path("/shared"))  # fmt: skip


def option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_on_local_the_live_jobs_take_replay_requests_and_the_replay_is_the_process_replays_twin() -> None:
    assert LOCAL.replays_in_job
    for (name, live), (replay_name, replay) in ((LOCAL.enrich(), LOCAL.enrich(replay=True)),
                                                (LOCAL.infer(), LOCAL.infer(replay=True))):  # fmt: skip
        request = LOCAL.replay_request(name)
        assert option(live, "--replay-requests") == str(request.folder) == f"/run/replay-requests/{name}"
        # the same query name (so the same transactional.ids) and checkpoint as the process it replaces
        assert (request.query, str(request.checkpoint)) == (replay_name, option(replay, "--checkpoint"))
        assert request.query != option(live, "--query") and request.checkpoint != Path(option(live, "--checkpoint"))
        assert request.suffix == ".replay"


def test_on_a_cluster_the_replays_stay_processes_on_local() -> None:
    assert not CLUSTER.replays_in_job
    for _, live in (CLUSTER.enrich(), CLUSTER.infer()):
        assert "--replay-requests" not in live
    for _, replay in (CLUSTER.enrich(replay=True), CLUSTER.infer(replay=True)):
        assert "--master" not in replay  # local[2], the job's default
