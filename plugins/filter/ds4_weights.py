"""Filters for the weights role's messages; the wording lives in module_utils/_weights/report.py.

- `__ds4_weights_plan | ds4.fleet.weights_plan_lines(ansible_check_mode)` -> the plan, a line per action
- `_ds4_weights_results | ds4.fleet.weights_outcome_lines` -> what became of each file
- `__ds4_weights_plan | ds4.fleet.weights_cleanup_lines` -> what the cleanup removed and kept
"""

from __future__ import annotations

from ansible_collections.ds4.fleet.plugins.module_utils._weights.report import (
    cleanup_lines,
    outcome_lines,
    plan_lines,
)


def weights_plan_lines(plan, check_mode=False):
    return plan_lines(plan, bool(check_mode))


def weights_outcome_lines(results):
    return outcome_lines(results)


def weights_cleanup_lines(plan):
    return cleanup_lines(plan)


class FilterModule:
    def filters(self):
        return {
            "weights_plan_lines": weights_plan_lines,
            "weights_outcome_lines": weights_outcome_lines,
            "weights_cleanup_lines": weights_cleanup_lines,
        }
