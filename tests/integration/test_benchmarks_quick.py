"""The benchmarks' ``--quick`` modes: each runs with small counts, checks its own Turns and calls
(exiting non-zero on a wrong answer), and prints its JSON with every key. No figure is checked: a
benchmark gates nothing, and a busy machine must not fail these (``cli.py`` alone gates, on a
ratio with room for a busy machine: ``--help``'s imports against a bare interpreter's)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import nats_server_binary

ROOT = Path(__file__).resolve().parents[2]
QUICK_SECONDS = 150
"""The most one quick run may take: a few seconds alone, far more on a loaded machine."""


def run_quick(script: str, *flags: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), "--quick", "--json", *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=QUICK_SECONDS,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # --json promises one JSON object on stdout and nothing else (a log line there breaks a
    # script reading it), so the whole of stdout is parsed.
    figures: dict[str, Any] = json.loads(done.stdout)
    return figures


def numbers(row: dict[str, Any], *keys: str) -> None:
    """Each of ``keys`` is in ``row``, a number."""
    for key in keys:
        assert isinstance(row[key], float | int), (key, row.get(key))


def require_peers() -> None:
    """The peers of the comparisons (the ``bench`` extra, part of ``dev``) are installed."""
    missing = [name for name in ("agents", "pydantic_ai") if importlib.util.find_spec(name) is None]
    assert not missing, f"{missing} missing: pip install -e '.[dev]' installs the bench extra"


@pytest.mark.timeout(QUICK_SECONDS + 10)
def test_tool_call_quick_prints_every_figure_with_the_sandbox_beside_its_floor() -> None:
    figures = run_quick("tool_call.py")
    for label in ("async", "inline", "thread"):
        assert isinstance(figures[f"{label}_overhead_us"], float | int)
        assert set(figures["handlers"][label]) == {
            "direct_us",
            "executor_us",
            "overhead_us",
            "ratio",
        }
    box = figures["sandbox"]
    assert box["command"] == "true"
    assert box["calls"] >= 1
    # The floor is always measured; a backend is either measured or skipped with its reason.
    assert isinstance(box["off_ms"], float)
    assert isinstance(box["bare_sh_ms"], float)
    for mode in ("bwrap", "namespaces"):
        keys = {f"{mode}_ms", f"{mode}_p90_ms", f"{mode}_p99_ms", f"{mode}_added_ms"}
        assert keys <= set(box)
        if mode in box["skipped"]:
            assert box["skipped"][mode]
            assert all(box[key] is None for key in keys)
        else:
            assert mode in box["backends"]
            assert all(isinstance(box[key], float) for key in keys)
    assert ("bwrap" in box["skipped"]) == (box["bare_bwrap_ms"] is None)
    assert "bare_bwrap_added_ms" in box
    assert figures["targets"]["sandbox_bwrap_added_ms"] == 10.0
    # The network proxy: an HTTPS request through it and without (printed, never gated).
    proxy = figures["proxy"]
    assert proxy["requests"] >= 1
    for key in ("direct_ms", "proxied_ms", "added_ms", "direct_p90_ms", "proxied_p90_ms"):
        assert isinstance(proxy[key], float), key
    assert figures["targets"]["proxy_added_ms"] == 5.0


@pytest.mark.timeout(QUICK_SECONDS + 10)
def test_ipc_quick_prints_every_figure_and_ratio() -> None:
    figures = run_quick("ipc.py")
    numbers(
        figures,
        *("raw_pipe_rtt_us", "raw_pipe_p99_us", "bare_broker_rtt_us", "bare_broker_p99_us"),
        *("delegate_rtt_us", "delegate_p99_us", "handoff_turn_us", "handoff_turn_p99_us"),
        *("handoff_floor_us", "throughput_rps", "bare_broker_throughput_rps"),
        *("floor_child_ready_ms", "spawn_ready_ms", "spawn_unpooled_ms", "crash_ready_ms"),
        *("floor_child_uss_mib", "agent_uss_mib", "agent_pss_mib"),
        *("bare_child_nothing_uss_mib", "bare_child_collect_uss_mib"),
        *("bare_child_unfrozen_collect_uss_mib", "bare_child_refcount_walk_uss_mib"),
        *("agent_uss_over_bare_child", "bare_child_share_of_agent_uss"),
        *("agent_copied_mib", "agent_new_mib", "bare_child_copied_mib", "bare_child_new_mib"),
        *("floor_child_faults", "agent_ready_faults"),
    )
    # The do-nothing children run under the fork server's frozen preload, as an agent does.
    assert figures["preload_frozen_objects"] > 0
    numbers(figures["handoff_floor_parts_us"], "ipc_hops", "fsyncs", "inprocess_turn")
    assert len(figures["ratios"]) == 10
    for name, row in figures["ratios"].items():
        if name == "delegate / bare broker":  # reported beside the others, with no target
            numbers(row, "ratio")
            assert row["target"] is None
            continue
        numbers(row, "ratio", "target")
        assert isinstance(row["met"], bool)


@pytest.mark.timeout(QUICK_SECONDS + 10)
def test_http_api_quick_prints_every_path_beside_the_in_process_baseline_and_the_floor() -> None:
    figures = run_quick("http_api.py")
    # The floor runs on the parser the daemon's API runs on (httptools, a core dependency).
    assert figures["parsers"] == {"api": "httptools", "floor": "httptools"}
    for baseline in ("in_process", "in_process_first_delta"):
        numbers(figures[baseline], "median_ms", "p99_ms", "p99_to_median")
    numbers(figures["cli_client_unix_socket"], "median_ms", "p99_ms", "added_ms")
    for transport in ("unix_socket", "tcp_loopback"):
        for kind in ("http", "chat", "chat_stream_first_chunk"):
            path = f"{kind}_{transport}"
            numbers(figures[f"floor_{path}"], "median_ms", "p99_ms", "p99_to_median")
            numbers(figures[path], "median_ms", "p99_ms", "p99_to_median", "ratio_to_in_process")
            numbers(figures[path], "added_ms", "floor_ms", "over_floor_ms")


@pytest.mark.timeout(QUICK_SECONDS + 10)
def test_durable_requests_quick_prints_each_path_beside_the_one_without_records() -> None:
    figures = run_quick("durable_requests.py")
    assert figures["count"] == 10
    assert figures["records_on_disk"] > 0  # the durable paths wrote their records
    for path in ("in_process", "memory", "durable", "durable_key", "durable_key_stream"):
        numbers(figures[path], "median_ms", "p99_ms", "cpu_ms")
    for path in ("durable", "durable_key", "durable_key_stream"):
        numbers(figures[path], "added_ms", "added_pct", "added_cpu_ms")


@pytest.mark.timeout(QUICK_SECONDS + 10)
def test_peers_quick_runs_every_contender() -> None:
    require_peers()
    figures = run_quick("peers.py")
    assert figures["turns"] == 20
    contenders = {"openai_agents", "pydantic_ai", "goondan_inprocess", "durable_write_floor"}
    assert contenders | {"goondan_daemon"} <= set(figures["labels"])
    for key in figures["labels"]:
        numbers(figures, f"{key}_turn_us", f"{key}_turn_p99_us", f"{key}_ratio_to_ours")
    assert figures["goondan_inprocess_ratio_to_ours"] == 1.0
    assert {"cpu", "cores", "python", "openai_agents", "pydantic_ai"} <= set(figures["machine"])


@pytest.mark.timeout(QUICK_SECONDS + 10)
def test_cluster_quick_prints_the_cross_node_delegate_beside_its_floors() -> None:
    nats_server_binary()  # skips loudly without one (fails under GOONDAN_REQUIRE_NATS)
    figures = run_quick("cluster.py")
    for name in ("nats_request_reply", "local_delegate", "cross_node_delegate"):
        numbers(figures, f"{name}_rtt_us", f"{name}_p99_us")
    assert len(figures["ratios"]) == 4
    numbers(figures["ratios"], *figures["ratios"])


@pytest.mark.timeout(QUICK_SECONDS + 10)
def test_failover_quick_times_a_node_and_a_leader_lost_and_the_load() -> None:
    nats_server_binary()
    figures = run_quick("failover.py")
    assert figures["runs"] == 1
    numbers(figures, "heartbeat_s", "expiry_s")
    for key, count in (
        ("node_loss_to_answer_s", 1),
        ("leader_loss_to_serving_s", 1),
        ("load_before", 3),
        ("load_after", 3),
    ):
        assert len(figures[key]) == count, (key, figures)
        assert all(isinstance(figure, float | int) for figure in figures[key]), (key, figures)


@pytest.mark.timeout(QUICK_SECONDS + 10)
def test_otel_export_quick_prints_each_setting_against_export_off() -> None:
    figures = run_quick("otel_export.py")
    assert set(figures) == {"off", "on", "unreachable"}
    for row in figures.values():
        numbers(row, "median_ms", "p99_ms", "cpu_ms_per_request", "requests_per_s", "stop_s")
        numbers(row, "median_ms_vs_off", "cpu_ms_per_request_vs_off", "requests_per_s_vs_off")
    numbers(figures["on"], "spans_received")


@pytest.mark.timeout(QUICK_SECONDS + 10)
def test_parallel_calls_quick_prints_both_ways() -> None:
    figures = run_quick("parallel_calls.py")
    assert figures["calls"] == 4
    numbers(figures, "call_ms", "sequential_turn_ms", "parallel_turn_ms", "speedup")


@pytest.mark.timeout(QUICK_SECONDS + 10)
def test_permits_quick_prints_every_figure_and_ratio() -> None:
    figures = run_quick("permits.py")
    numbers(
        figures,
        *("raw_pipe_rtt_us", "permit_rtt_us", "permit_buckets_rtt_us", "permit_cost_us"),
        *("turn_no_limits_us", "turn_max_concurrent_us", "turn_buckets_us"),
        *("permit_cost_buckets_us", "model_call_us", "model_call_p99_us"),
    )
    contention = figures["contention"]
    numbers(contention, "calls_per_s", "ideal_calls_per_s", "of_ideal", "no_limits_calls_per_s")
    assert contention["max_in_flight"] == 1  # the pool of maxConcurrent: 1 held
    assert len(figures["ratios"]) == 7


@pytest.mark.timeout(QUICK_SECONDS + 10)
def test_scale_quick_prints_every_figure() -> None:
    figures = run_quick("scale.py")
    assert figures["agents"] == 3
    numbers(
        figures,
        *("all_ready_s", "total_pss_mib", "daemon_pss_mib", "fork_server_pss_mib"),
        *("agent_pss_mib_median", "agent_uss_mib_median", "processes", "status_ms"),
        *("agent_faults_median",),
        *("status_uncached_ms", "status_api_ms", "all_stopped_s"),
        *("delegate_rtt_us_2", "delegate_rtt_us_3", "delegate_rtt_ratio_3_vs_2"),
    )
    numbers(figures["start_cpu_ms_per_agent"], "daemon", "fork_server", "agent")
    assert figures["status_rows"] >= 5  # the three agents, pinger and echo


@pytest.mark.timeout(QUICK_SECONDS + 10)
def test_written_pages_quick_places_the_floor_childs_writes_in_preloaded_objects() -> None:
    figures = run_quick("written_pages.py")
    numbers(figures, "copied_pages", "pages_unchanged_since", "changed_words")
    assert figures["copied_pages"] > 0
    assert figures["pages_by_mapping"]
    # Some changed words lie in objects the fork server preloaded: a reference count at least.
    assert "refcnt" in figures["words_by_field"]


SLOW_MODEL_KEYS = (
    *("answered", "wall_s", "ideal_s", "overhead_p50_ms", "overhead_p99_ms"),
    *("cpu_s_per_request", "processes", "idle_pss_mib", "peak_pss_mib", "turns_in_flight_max"),
    "cpu_over_bare_client",
)
BARE_CLIENT_KEYS = ("calls", "cpu_ms_per_call", "cpu_s_per_request")


@pytest.mark.timeout(QUICK_SECONDS + 10)
def test_slow_model_quick_answers_every_request_beside_the_provider_and_the_agents_sdk() -> None:
    require_peers()
    figures = run_quick("slow_model.py")
    ours = figures["goondan"]
    assert (ours["requests"], ours["agents"], figures["delay_s"]) == (20, 2, 0.05)
    assert ours["answered"] == 20
    assert ours["errors"] == {}
    assert ours["ideal_s"] == pytest.approx(0.1)
    numbers(ours, *SLOW_MODEL_KEYS)
    assert "pss_per_turn_in_flight_kib" in ours
    assert "chunk_delay_ms" not in ours
    numbers(figures["bare_client"], *BARE_CLIENT_KEYS)
    assert figures["bare_client"]["calls"] == 40  # the daemon's model calls: two per request
    alone = figures["provider_alone"]
    numbers(alone, "answered", "wall_s", "requests_per_s", "overhead_p50_ms", "overhead_p99_ms")
    peer = figures["openai_agents"]
    assert peer["answered"] == 20
    numbers(peer, "wall_s", "overhead_p50_ms", "overhead_p99_ms", "max_rss_mib", "peak_pss_mib")
    assert len(figures["load_average"]) == 3


@pytest.mark.timeout(QUICK_SECONDS + 10)
def test_slow_model_quick_streams_through_a_coordinator_and_times_each_agents_chunks() -> None:
    figures = run_quick("slow_model.py", "--stream", "--delegate")
    ours = figures["goondan"]
    assert (ours["answered"], ours["errors"]) == (20, {})
    assert ours["ideal_s"] == pytest.approx(0.2)  # four model calls per request
    numbers(ours, *SLOW_MODEL_KEYS)
    assert set(ours["chunk_delay_ms"]) == {"asked", "delegated"}
    numbers(figures["bare_client"], *BARE_CLIENT_KEYS)
    assert figures["bare_client"]["calls"] == 80  # four model calls per request
    for delays in ours["chunk_delay_ms"].values():
        numbers(delays, "p50", "p99")
    assert "skipped" in figures["openai_agents"]


@pytest.mark.timeout(QUICK_SECONDS + 10)
def test_resumed_turn_quick_prints_the_kill_to_answer_time_beside_its_floor() -> None:
    figures = run_quick("resumed_turn.py")
    assert figures["samples"] == 3
    numbers(
        figures,
        *("turn_ms", "killed_turn_ms", "kill_to_answer_ms", "crash_ready_ms"),
        "kill_to_answer_over_crash_ready",
    )


@pytest.mark.timeout(QUICK_SECONDS + 10)
def test_cli_quick_prints_each_command_beside_its_floor_and_what_help_imports() -> None:
    # A quick mode that gates: it exits 1 (run_quick fails) when --help imports the daemon's
    # stack; which modules, not how long they take, so a loaded machine cannot fail it.
    figures = run_quick("cli.py")
    assert figures["agents"] == 3
    numbers(
        figures,
        *("bare_ms", "help_ms", "status_ms", "send_ms", "completion_ms"),
        *("status_http_ms", "send_http_ms", "help_import_ms", "bare_import_ms"),
        "help_import_ratio",
    )
    numbers(figures["ratios"], "help", "status", "send", "completion")
    assert figures["help_daemon_imports"] == []
    assert len(figures["load_average_before"]) == 3


def test_the_cli_gate_names_what_help_imports_of_the_daemons_stack() -> None:
    from benchmarks.cli import daemon_imports

    def importtime(*names: str) -> bytes:
        head = "import time: self [us] | cumulative | imported package\n"
        return (head + "".join(f"import time: 10 | 20 | {name}\n" for name in names)).encode()

    assert daemon_imports(importtime("argparse", "orchestrator.cli.parser", "asyncio_x")) == []
    heavy = importtime("asyncio", "  asyncio.events", "orchestrator.daemon", "msgspec._core")
    assert daemon_imports(heavy) == [
        "asyncio",
        "asyncio.events",
        "msgspec._core",
        "orchestrator.daemon",
    ]


@pytest.mark.timeout(QUICK_SECONDS + 10)
def test_first_answer_quick_lists_the_core_install_and_times_its_first_answer() -> None:
    figures = run_quick("first_answer.py")
    assert figures["mode"] == "quick"
    assert figures["readme_line"].startswith("pip install ")
    assert len(figures["core_requirements"]) >= 1
    assert figures["core_package_count"] == len(figures["core_packages"])
    assert {"pydantic", "starlette", "uvicorn"} <= set(figures["core_packages"])
    assert not {"rich", "genai-prices", "httpx"} & set(figures["core_packages"])
    numbers(figures, "answer_s", "run_s", "answer_again_s")
    assert len(figures["load_average"]) == 3
