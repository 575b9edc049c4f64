"""umbra/training/export.py's provenance: how the weights began travels from the run directory's
init.json into training.json (the card reads it), and only budget changes up to the step exported."""

from __future__ import annotations

from umbra.training.export import provenance


def test_provenance_records_the_init_and_the_changes_so_far():
    changes = [{"step": 5, "old_total_tokens": 10, "new_total_tokens": 12},
               {"step": 50, "old_total_tokens": 12, "new_total_tokens": 14}]
    prov = provenance({"out_dir": "runs/x", "threads": 1, "lr": 1e-3}, {"step": 10}, 20, changes,
                      {"init": "upscaled", "base_model": "models/umbra-code-tiny"})
    assert prov["init"] == {"init": "upscaled", "base_model": "models/umbra-code-tiny"}
    assert [c["step"] for c in prov["schedule_changes"]] == [5] and not prov["finished"]
    assert "out_dir" not in prov["config"]
    assert "init" not in provenance({"threads": 1}, {"step": 20}, 20)  # a run without init.json
