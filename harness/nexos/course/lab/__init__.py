"""The lab kit: solution regions in the kernel, starter trees, the grading plan (docs/lab.md)."""

from nexos.course.lab.markers import LABS, MarkerError, Region, parse, strip
from nexos.course.lab.plan import lab_checks, lab_plan, mechanism_plan, nonlab_checks, nonlab_plan
from nexos.course.lab.starter import StarterError, StarterTree, make_starter

__all__ = ["LABS", "MarkerError", "Region", "StarterError", "StarterTree", "lab_checks",
           "lab_plan", "make_starter", "mechanism_plan", "nonlab_checks", "nonlab_plan",
           "parse", "strip"]
