"""The built wheel, installed (not editable) into a fresh virtualenv, works outside a checkout:
``streamplace --help``, the shipped Kafka assets and cluster specs, and the Avro codec."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# What the CLI's start-up and the codec need; the rest (flink, torch, ...) is not exercised here
# and would cost minutes of installing.
LIGHT_DEPS = ["fastavro", "pydantic", "pyyaml", "psutil", "requests", "tqdm"]


def _run(cmd, **kwargs):
    result = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, f"{cmd} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory):
    work = tmp_path_factory.mktemp("wheel")
    _run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(work),
          str(ROOT)])
    wheels = list(work.glob("streamplace-*.whl"))
    assert len(wheels) == 1, wheels
    env_dir = work / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    constraints = ROOT / "constraints.txt"
    _run([str(python), "-m", "pip", "install", "--quiet", "-c", str(constraints), *LIGHT_DEPS])
    _run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", str(wheels[0])])
    return env_dir, work


def _clean_env():
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "STREAMPLACE_HOME",
                                                            "STREAMPLACE_CONFIG"}}
    return env


def test_cli_help_from_the_wheel(fresh_venv):
    env_dir, work = fresh_venv
    out = _run([str(env_dir / "bin" / "streamplace"), "--help"], cwd=work, env=_clean_env())
    assert "kafka" in out and "cluster" in out


def test_shipped_assets_come_from_site_packages(fresh_venv):
    env_dir, work = fresh_venv
    out = _run([str(env_dir / "bin" / "streamplace"), "info", "--json"], cwd=work,
               env=_clean_env())
    info = json.loads(out)
    assets = Path(info["kafka_assets"])
    assert "site-packages" in str(assets) and str(ROOT) not in str(assets)
    for name in ("pom.xml", "server.properties.template", "log4j2.properties", "topics.yaml"):
        assert (assets / name).is_file(), name
    assert (Path(info["cluster_specs"]) / "default.yaml").is_file()
    assert info["home"] == str(Path.home() / ".streamplace")  # not a checkout: user folder


def test_codec_from_the_wheel(fresh_venv):
    env_dir, work = fresh_venv
    code = ("from workload.codec import encode, decode, CodecError\n"
            "d = encode('TaskEvent', {'task_id': 'w', 'app_id': 'a', 'input_size': 3, "
            "'submitted_at_ms': 4})\n"
            "assert decode('TaskEvent', d)['input_size'] == 3\n"
            "try:\n    decode('TaskEvent', b'junk')\nexcept CodecError as e:\n    print('ok', e)\n"
            "import workload.codec as c; print(c.__file__)")
    out = _run([str(env_dir / "bin" / "python"), "-c", code], cwd=work, env=_clean_env())
    assert out.startswith("ok ") and "site-packages" in out
