"""The maze comparison's report finds the stretches in which a run's policy never moved (no return, entropy at
ln 6 of MiniGrid's 7 actions), report by report."""

import math

from benchmarks.dcd_maze import spells_text, still_spells


def _record(trained: int, ret: float, entropy: float) -> dict:
    return {"samples_trained": trained, "episode_return_mean": ret, "learner_entropy": entropy}


def test_still_spells_are_the_runs_of_reports_with_no_return_at_entropy_ln_6():
    ln6 = math.log(6)
    records = [_record(1_000_000, 0.30, 1.70), _record(2_000_000, 0.00, ln6 + 0.01), _record(3_000_000, 0.01, ln6),
               _record(4_000_000, 0.40, 1.60),
               _record(5_000_000, 0.00, 1.95),  # no return, but acting at random (ln 7): it moves
               _record(6_000_000, 0.20, ln6),   # entropy ln 6 with returns: it moves
               _record(7_000_000, 0.02, ln6 - 0.02)]
    spells = still_spells(records)
    assert spells == [(2_000_000, 3_000_000), (7_000_000, 7_000_000)]
    assert spells_text(spells) == "2.0-3.0, 7.0" and spells_text([]) == "-"
