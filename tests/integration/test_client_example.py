"""examples/resources_pipeline.py runs as documented: GPU steps on the GPU workers, each on
its own device, and the aggregate on the only worker with MEMORY=100e9."""

import re
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "resources_pipeline.py"


def test_the_resources_pipeline_example(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "XDG_CONFIG_HOME": str(tmp_path), "PYTHONUNBUFFERED": "1"}
    done = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True,
                          timeout=120, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = re.findall(r"part-\d\.csv: loaded on \S+, processed on (gpu-[ab]) with GPU \[(\d)\] "
                       r"\(CUDA_VISIBLE_DEVICES=(\d)\)", done.stdout)
    assert len(lines) == 8
    assert all(gpu == device and device in "01" for _, gpu, device in lines)
    assert "aggregate: total 360 on bigmem (MEMORY=70e9)" in done.stdout
