"""A script that reaches for a Ray API muster does not have."""

import muster as ray

ray.init(num_cpus=1)
ray.timeline(filename="trace.json")
