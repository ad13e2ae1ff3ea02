"""``muster.init(address=<a Ray cluster>, runtime_env={"working_dir": <a local folder>})``: the folder reaches
Ray's own ``ray.init``, which uploads it, so Ray's workers run in its copy and import from it, as on Ray."""

from __future__ import annotations

import muster


def test_a_local_working_dir_reaches_the_workers_of_a_ray_cluster(ray_cluster, tmp_path):
    (tmp_path / "shipped_module_t.py").write_text("VALUE = 'from the working_dir'\n")
    (tmp_path / "data.txt").write_text("a relative file\n")

    @muster.remote
    def read():  # defined here: pickled by value
        import shipped_module_t

        with open("data.txt") as f:
            return shipped_module_t.VALUE, f.read().strip()

    muster.shutdown()
    try:
        muster.init(address=ray_cluster.address, runtime_env={"working_dir": str(tmp_path)})
        assert muster.get(read.remote(), timeout=120) == ("from the working_dir", "a relative file")
    finally:
        muster.shutdown()
        muster.init(num_cpus=4, num_gpus=0)  # the session's embedded engine, as tests/conftest.py starts it
