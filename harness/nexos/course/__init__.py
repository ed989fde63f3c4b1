"""The course: grading (grade, report) and the lab kit (lab/: starter trees, plans, batches,
the Gradescope bundle, hand-in)."""
