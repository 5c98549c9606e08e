"""The placement service dies mid-stream (routers pull LDWP models from it) and comes back 10 s
later on the same port and model folder: routing never stops, every result exactly once, and
the restarted service resumes from its stored versions."""

from __future__ import annotations

import socket
import time

from fault_harness import run_with_fault, scenario_config


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_service_killed_mid_stream(fault_config, fault_cluster, fault_report, tmp_path):
    from placement.service import PlacementService, ServiceSettings
    cfg = scenario_config(fault_config, "service")
    settings = ServiceSettings(
        port=_free_port(), bootstrap_servers=cfg.kafka.bootstrap_servers,
        feedback_topic=cfg.job.topic_feedback, group_id="service-faults",
        flink_rest_url=fault_cluster.rest_url, model_dir=str(tmp_path / "models"),
        publish_every=200, min_records_first_version=150)
    services = [PlacementService(settings).start()]

    def inject(_job_id):
        started = time.time()
        services[0].stop()
        time.sleep(10.0)
        services.append(PlacementService(settings).start())
        return started, time.time()

    try:
        run = run_with_fault(cfg, fault_cluster, "service", inject, policy="ldwp",
                             service_url=services[0].url)
        state = fault_cluster.job(run.job_id)["state"]
        fault_cluster.cancel_job(run.job_id)
        before = services[0].store.latest()
        after = services[-1].store.latest()
    finally:
        services[-1].stop()
    figures = run.figures()
    figures["model_version_before_kill"] = before["version"] if before else None
    figures["model_version_after_restart"] = after["version"] if after else None
    fault_report["placement service killed 10 s"] = figures
    assert run.exactly_once(), figures
    assert state == "RUNNING"
    if before is not None:  # resumed from what it had stored, never from scratch
        assert after is not None and after["version"] >= before["version"]
