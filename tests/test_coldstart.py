"""helpers.coldstart: each launch really is a new interpreter, checks its first answer there, starts from empty
compile caches when asked (and refuses a cache that is not), and reports phases that add up to the first answer.
Each launch imports torch in a new process: seconds each, so the replicas here are tiny and eager."""

import os
import time

import pytest
import torch

from helpers import coldstart

REPLICA = """
import os

import torch

REPORT = {}


def load(artifacts, device):
    REPORT["pid"] = os.getpid()
    REPORT["inductor_cache"] = os.environ["TORCHINDUCTOR_CACHE_DIR"]
    weight = torch.load(artifacts / "weight.pt", weights_only=True)
    return lambda x: x @ weight {tamper}
"""


@pytest.fixture()
def replica(tmp_path):
    weight = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    torch.save(weight, tmp_path / "weight.pt")
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(1))

    def write(name="replica.py", tamper=""):
        path = tmp_path / name
        path.write_text(REPLICA.replace("{tamper}", tamper))
        return path

    return tmp_path, write, x, x @ weight


def test_a_launch_is_a_new_interpreter_that_checks_its_answer(replica):
    folder, write, x, expected = replica
    start = time.time()
    run = coldstart.launch(write(), inputs=x, expected=expected, artifacts=folder, budget=0.0, min_repeats=3)
    wall = time.time() - start
    written = {p.name for p in folder.iterdir() if p.is_file()}
    assert written == {"weight.pt", "replica.py"}  # the batch for the child went to the outputs folder
    assert run.extra["pid"] != os.getpid()  # the model was loaded in another process
    assert run.extra["inductor_cache"] == str(run.cache.inductor)  # with the caches it was given
    assert run.max_abs_error <= 1e-6
    assert set(run.phases) == set(coldstart.PHASES)
    assert all(s >= 0 for s in run.phases.values())
    assert run.phases["import torch"] > 0.05  # a real import of torch, not an already warm interpreter
    assert run.first_answer <= wall  # stamped between the parent's launch and the child's answer
    assert run.steady.n >= 3
    assert run.cache_files == (0, 0)


def test_a_wrong_first_answer_fails_in_the_replica(replica):
    folder, write, x, expected = replica
    with pytest.raises(RuntimeError, match="first answer differs from the expected output"):
        coldstart.launch(write("wrong.py", tamper="+ 1e-2"), inputs=x, expected=expected, artifacts=folder, budget=0.0)


def test_a_cache_that_is_not_empty_is_refused(replica, monkeypatch, tmp_path):
    folder, write, x, expected = replica
    monkeypatch.setenv("COURSE_OUTPUTS", str(tmp_path / "outputs"))
    cache = coldstart.empty_cache("reused")
    (cache.inductor / "left-over").write_text("x")
    with pytest.raises(ValueError, match="not empty"):
        coldstart.launch(write(), inputs=x, expected=expected, artifacts=folder, cache=cache, expect_empty_cache=True)
    with pytest.raises(ValueError, match="already holds"):
        coldstart.empty_cache("reused")
    warm = coldstart.launch(write(), inputs=x, expected=expected, artifacts=folder, cache=cache, budget=0.0)
    assert warm.cache_files[0] == 1  # a given cache is used as it is (a warm-cache replica)


def test_launches_give_one_sample_per_process(replica):
    folder, write, x, expected = replica
    first = coldstart.launch(write(), inputs=x, expected=expected, artifacts=folder, budget=0.0, label="tiny")
    rows = coldstart.launches(
        write(), 2, earlier=[first], inputs=x, expected=expected, artifacts=folder, budget=0.0, label="tiny"
    )
    assert len(rows.launches) == 2
    assert rows.launches[0] is first
    assert rows.launches[1].extra["pid"] != first.extra["pid"]
    assert rows.first_answer.n == 2
    assert rows.label == "tiny"
    table = coldstart.table([rows], {"tiny": 0.5})
    assert table.loc["tiny", "launches"] == 2
    assert table.loc["tiny", "artifact MiB"] == 0.5


def test_bad_arguments_get_one_line(replica, tmp_path):
    folder, write, x, expected = replica
    with pytest.raises(FileNotFoundError, match="defines load"):
        coldstart.launch(tmp_path / "missing.py", inputs=x, expected=expected, artifacts=folder)
    with pytest.raises(FileNotFoundError, match="not a folder"):
        coldstart.launch(write(), inputs=x, expected=expected, artifacts=tmp_path / "nowhere")
    with pytest.raises(TypeError, match="must be a tensor"):
        coldstart.launch(write(), inputs=[1.0], expected=expected, artifacts=folder)
    (tmp_path / "noload.py").write_text("x = 1\n")
    with pytest.raises(RuntimeError, match="defines no load"):
        coldstart.launch(tmp_path / "noload.py", inputs=x, expected=expected, artifacts=folder)
    with pytest.raises(ValueError, match="n ≥ 1|integer ≥ 1"):
        coldstart.launches(write(), 0, inputs=x, expected=expected, artifacts=folder)
    with pytest.raises(ValueError, match="batch dimension"):
        coldstart.launch(write(), inputs=torch.tensor(1.0), expected=expected, artifacts=folder)
    if not torch.cuda.is_available():  # refused in one line before any process starts
        with pytest.raises(ValueError, match="no usable CUDA GPU"):
            coldstart.launch(write(), inputs=x, expected=expected, artifacts=folder, device="cuda")
    with pytest.raises(TypeError, match="env must map"):
        coldstart.launch(write(), inputs=x, expected=expected, artifacts=folder, env={"N": 1})
