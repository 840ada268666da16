"""`python -m benchmarks.peers e2e` on a tiny teacher: TRL's GKD trainer beside destila, same data, order and maths."""

import json

import pytest

from conftest import pydoc_texts
from benchmarks.peers.e2e import compare_to, peer_trainer_unavailable
from benchmarks.peers.run import main as peers


@pytest.mark.slow
@pytest.mark.skipif(peer_trainer_unavailable("trl-gkd") is not None, reason="trl not installed (destila[peers])")
def test_trl_gkd_follows_destila_online_step_for_step(tiny_llama_dir, tmp_path, capsys):
    # One long document: no packed row crosses a document boundary, where destila restarts positions and
    # TRL's GKD (no position_ids in its forward) would not, so both trainers see exactly the same rows.
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text(json.dumps({"text": "\n\n".join(pydoc_texts(12))}) + "\n")
    out = tmp_path / "e2e.json"
    with pytest.raises(SystemExit) as done:
        peers(["e2e", "--teacher", str(tiny_llama_dir), "--student-layers", "2",
             "--data", str(corpus), "--seq-len", "32", "--batch-size", "2", "--steps", "3", "--top-k", "16",
             "--lr", "3e-3", "--heldout-tokens", "64", "--workdir", str(tmp_path / "work"), "--json", str(out),
             "--csv", str(tmp_path / "e2e.csv")])
    assert done.value.code == 0
    rows = {r["method"]: r for r in json.loads(out.read_text())["rows"]}
    assert list(rows) == ["online", "fused", "trl-gkd", "trl-distill", "trl-gkd-liger"]
    assert [rows[m]["status"] for m in ("online", "fused", "trl-gkd")] == ["ok"] * 3
    assert "on-policy" in rows["trl-distill"]["error"] and "Liger" in rows["trl-gkd-liger"]["error"]
    assert rows["trl-distill"]["status"] == rows["trl-gkd-liger"]["status"] == "unavailable"
    # Same student, sequences, order, optimizer and loss (full forward KL): the same losses step for step.
    assert rows["trl-gkd"]["losses"][0] == pytest.approx(rows["online"]["losses"][0], rel=1e-5)
    assert rows["trl-gkd"]["losses"] == pytest.approx(rows["online"]["losses"], rel=1e-3)
    for row in (rows["online"], rows["fused"], rows["trl-gkd"]):
        assert row["heldout_tokens"] == 2 * 31 and row["heldout_kl"] > 0 and row["peak_bytes"] > 0
        assert row["memory_vs_trl-gkd"] == pytest.approx(row["peak_bytes"] / rows["trl-gkd"]["peak_bytes"])
    # Online destila and GKD trained the same model: the same held-out KL.
    assert rows["online"]["heldout_kl"] == pytest.approx(rows["trl-gkd"]["heldout_kl"], rel=1e-3)
    assert "held-out full KL" in capsys.readouterr().out


def test_ratios_to_the_reference_row():
    rows = [{"method": "trl-gkd", "status": "ok", "peak_bytes": 4.0, "step_seconds": 2.0, "heldout_kl": 0.5},
            {"method": "fused", "status": "ok", "peak_bytes": 1.0, "step_seconds": 1.0, "heldout_kl": 0.51},
            {"method": "trl-distill", "status": "unavailable", "peak_bytes": None}]
    compare_to(rows, "trl-gkd")
    assert rows[1]["memory_vs_trl-gkd"] == 0.25 and rows[1]["time_vs_trl-gkd"] == 0.5
    assert rows[1]["heldout_kl_vs_trl-gkd"] == pytest.approx(0.02)
    assert "memory_vs_trl-gkd" not in rows[2]


def test_peers_refuses_what_it_would_ignore(capsys):
    for extra, expected in ((["--plot", "x.png"], "--plot"), (["--peers", "trl-gkd,magic"], "magic")):
        with pytest.raises(SystemExit) as done:
            peers(["e2e", *extra])
        assert done.value.code == 2 and expected in capsys.readouterr().err
