"""A router serving the placement service's interleaved version trial (pyflink_jobs.model_trial,
Router.install_candidate, ModelRefresher): the candidate decides its share of the task ids
beside the champion, every decision says which version made it, and hostile trial metadata is
refused."""

from __future__ import annotations

import pytest
from test_router import NODES, FakeClock, _agent, event

from placement.service.interleaved_trial import in_candidate_share
from placement.service.interleaved_trial import candidate_trial
from pyflink_jobs.router import ModelRefresher, Router, RouterSettings


@pytest.fixture(scope="module")
def model_files(tmp_path_factory) -> dict[int, bytes]:
    """Two different model files (seeds 1 and 2)."""
    folder = tmp_path_factory.mktemp("models")
    files = {}
    for seed in (1, 2):
        _, agent = _agent(seed=seed)
        agent.save(folder / f"s{seed}")
        files[seed] = (folder / f"s{seed}").read_bytes()
    return files


def ldwp_router(**kw) -> Router:
    return Router(RouterSettings(nodes=NODES, policy="ldwp", **kw), clock=FakeClock())


def decided_versions(router: Router, count: int, start: int = 0) -> dict[str, int]:
    return {f"t{i}": router.route_event(event(i))[1].model_version
            for i in range(start, start + count)}


def test_the_candidate_decides_exactly_its_share_of_the_task_ids(model_files):
    router = ldwp_router()
    router.install_model(model_files[1], version=4)
    router.install_candidate(model_files[2], version=9, share=0.3)
    versions = decided_versions(router, 600)
    on_candidate = {t for t, v in versions.items() if v == 9}
    assert set(versions.values()) == {4, 9}
    assert on_candidate == {t for t in versions if in_candidate_share(t, 0.3)}
    assert 0.22 <= len(on_candidate) / len(versions) <= 0.38
    stats = router.stats()
    assert stats["candidate_version"] == 9 and stats["candidate_decisions"] == len(on_candidate)
    assert stats["model_version"] == 4 and router.fallback_decisions == 0


def test_a_new_served_version_ends_the_trial(model_files):
    router = ldwp_router()
    router.install_model(model_files[1], version=4)
    router.install_candidate(model_files[2], version=9, share=0.5)
    router.install_model(model_files[2], version=10)      # the verdict's copy
    assert set(decided_versions(router, 50).values()) == {10}
    assert router.stats()["candidate_version"] is None


def test_a_candidate_beside_no_service_version_is_beside_the_fallback(model_files):
    """trial_champion -1: the rest of the tasks are decided as without the service (the
    fallback rule, stamped -1)."""
    router = ldwp_router()
    router.install_candidate(model_files[2], version=2, share=0.5)
    versions = decided_versions(router, 200)
    assert set(versions.values()) == {-1, 2}
    assert router.fallback_decisions == sum(v == -1 for v in versions.values())


def test_a_fixed_policy_ignores_a_candidate(model_files):
    router = Router(RouterSettings(nodes=NODES, policy="mct"), clock=FakeClock())
    router.install_candidate(model_files[2], version=9, share=0.9)
    assert set(decided_versions(router, 40).values()) == {-1}


@pytest.mark.parametrize("version,share", [(9, 0.0), (9, 1.0), (9, float("nan")), (-2, 0.5),
                                           (True, 0.5), (2**60, 0.5)])
def test_install_candidate_checks_its_arguments(model_files, version, share):
    router = ldwp_router()
    with pytest.raises(ValueError):
        router.install_candidate(model_files[2], version=version, share=share)
    assert router.candidate is None


class TrialService:
    """The service's HTTP client, with whole entries (their trial metadata too)."""

    def __init__(self, files: dict[int, bytes]):
        self.files = files
        self.entries: dict[int, dict] = {}
        self.downloads: list[int] = []

    def publish(self, version: int, **meta) -> None:
        self.entries[version] = {"version": version, **meta}

    def latest(self):
        return self.entries[max(self.entries)] if self.entries else None

    def download(self, version):
        self.downloads.append(version)
        return self.files[version]


def test_the_refresher_installs_the_champion_then_the_candidate_then_the_verdict(model_files):
    service = TrialService({4: model_files[1], 9: model_files[2], 10: model_files[2]})
    service.publish(9, trial_arm="candidate", trial_share=0.25, trial_champion=4)
    router = ldwp_router()                 # a router started during the trial: holds nothing
    refresher = ModelRefresher(router, service, interval_s=60.0)
    assert refresher.poll_once() is True
    assert (router.model_version, router.candidate.version) == (4, 9)
    assert router.candidate.share == 0.25 and service.downloads == [4, 9]
    assert refresher.poll_once() is False and service.downloads == [4, 9]   # nothing new
    service.publish(10, trial_arm="champion", copy_of=9)
    assert refresher.poll_once() is True
    assert router.model_version == 10 and router.candidate is None


def test_the_confirmation_copy_replaces_the_candidate_at_its_larger_share(model_files):
    """The service's confirmation stage (placement.service.interleaved_trial): a copy of the
    candidate, a newer version with a larger share, takes the candidate's place; the champion
    is not downloaded again."""
    service = TrialService({4: model_files[1], 9: model_files[2], 10: model_files[2]})
    service.publish(9, trial_arm="candidate", trial_share=0.1, trial_champion=4)
    router = ldwp_router()
    refresher = ModelRefresher(router, service, interval_s=60.0)
    assert refresher.poll_once() is True and router.candidate.version == 9
    service.publish(10, trial_arm="candidate", trial_stage=1, copy_of=9, trial_share=0.5,
                    trial_champion=4)
    assert refresher.poll_once() is True
    assert (router.model_version, router.candidate.version, router.candidate.share) == \
        (4, 10, 0.5)
    assert service.downloads == [4, 9, 10]
    ids = [f"t{i}" for i in range(2_000)]
    assert 0.45 <= sum(router.candidate.decides(t) for t in ids) / len(ids) <= 0.55


def test_a_router_already_on_the_champion_downloads_only_the_candidate(model_files):
    service = TrialService({4: model_files[1], 9: model_files[2]})
    router = ldwp_router()
    router.install_model(model_files[1], version=4)
    service.publish(9, trial_share=0.1, trial_champion=4)
    assert ModelRefresher(router, service).poll_once() is True
    assert service.downloads == [9] and router.candidate.version == 9


HOSTILE_TRIALS = [
    ("share NaN", {"trial_share": float("nan"), "trial_champion": 4}),
    ("share 1 (every task)", {"trial_share": 1.0, "trial_champion": 4}),
    ("share 5", {"trial_share": 5, "trial_champion": 4}),
    ("share text", {"trial_share": "all", "trial_champion": 4}),
    ("share true", {"trial_share": True, "trial_champion": 4}),
    ("no champion", {"trial_share": 0.1}),
    ("champion text", {"trial_share": 0.1, "trial_champion": "4"}),
    ("champion below -1", {"trial_share": 0.1, "trial_champion": -7}),
    ("champion huge", {"trial_share": 0.1, "trial_champion": 2**60}),
    ("champion is the candidate", {"trial_share": 0.1, "trial_champion": 9}),
]


@pytest.mark.parametrize("name,meta", HOSTILE_TRIALS, ids=[h[0] for h in HOSTILE_TRIALS])
def test_trial_metadata_it_cannot_read_is_refused_for_good(model_files, name, meta):
    service = TrialService({4: model_files[1], 9: model_files[2]})
    router = ldwp_router()
    router.install_model(model_files[1], version=4)
    service.publish(9, **meta)
    with pytest.raises(ValueError):
        candidate_trial(service.latest())
    refresher = ModelRefresher(router, service)
    assert refresher.poll_once() is False and refresher.poll_once() is False
    assert service.downloads == [] and 9 in refresher.refused_versions
    assert (router.model_version, router.candidate) == (4, None)
    assert "refused" in refresher.last_error


def test_a_champion_the_router_refuses_keeps_the_candidate_out_too(model_files):
    broken = bytearray(model_files[1])
    broken[-3] ^= 0xFF
    service = TrialService({4: bytes(broken), 9: model_files[2]})
    service.publish(9, trial_share=0.5, trial_champion=4)
    router = ldwp_router()
    refresher = ModelRefresher(router, service)
    assert refresher.poll_once() is False
    assert 4 in refresher.refused_versions and router.candidate is None
    assert refresher.poll_once() is False and service.downloads == [4]   # not fetched again
