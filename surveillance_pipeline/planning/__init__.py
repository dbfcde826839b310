"""What the next run would load, and why: read across every domain's keys, writing nothing (plan.py), shown
by `make plan` and by the plan_next_run job in the UI (job.py)."""
