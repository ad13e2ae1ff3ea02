"""read_parquet / write_parquet against a real S3-compatible server on loopback (moto's server mode)."""

from __future__ import annotations

import socket
import subprocess
import sys

import pyarrow as pa
import pyarrow.compute as pc
import pytest

pytest.importorskip("s3fs")
moto_server = pytest.importorskip("moto.server")

import muster.data as md  # noqa: E402
from muster.core.temp_files import HOST  # noqa: E402
from _shared import without_aws_credentials  # noqa: E402


@pytest.fixture(scope="module")
def bucket():
    import boto3
    import s3fs

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    mp = pytest.MonkeyPatch()
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{port}"}.items():
        mp.setenv(key, value)
    s3fs.S3FileSystem.clear_instance_cache()
    name = f"muster-data-{port}"
    boto3.client("s3").create_bucket(Bucket=name)
    try:
        yield name
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
        mp.undo()
        server.stop()


def test_write_then_read_parquet_on_s3(bucket):
    ds = md.from_arrow(pa.table({"id": list(range(40)), "v": [i * 0.5 for i in range(40)]})).repartition(4)
    files = ds.write_parquet(f"s3://{bucket}/table")
    assert len(files) == 4
    back = md.read_parquet(f"s3://{bucket}/table", columns=["id"], filter=pc.field("id") < 5)
    assert [r["id"] for r in back.take_all()] == [0, 1, 2, 3, 4]
    assert md.read_parquet(f"s3://{bucket}/table").count() == 40
    md.range(3).write_json(f"s3://{bucket}/js")
    assert md.read_json(f"s3://{bucket}/js").take_all() == [{"id": 0}, {"id": 1}, {"id": 2}]
    with pytest.raises(md.DataSourceError, match=f"s3://{bucket}/missing"):
        md.read_parquet(f"s3://{bucket}/missing")


def test_rays_anonymous_bucket_url_reads_without_credentials(bucket, monkeypatch):
    # Ray's examples read s3://anonymous@<bucket>/...: pyarrow's form of a public bucket, no credentials
    import boto3
    import s3fs

    boto3.client("s3").put_object(Bucket=bucket, Key="public/xy.csv", Body=b"x,y\n1.5,3.0\n2.0,4.0\n",
                                  ACL="public-read")
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(key)
    s3fs.S3FileSystem.clear_instance_cache()
    ds = md.read_csv(f"s3://anonymous@{bucket}/public")
    assert sorted(r["y"] for r in ds.take_all()) == [3.0, 4.0]


def test_a_write_removes_the_partial_files_of_killed_writers_of_this_host_only(bucket):
    # what a writer killed between its upload and the rename leaves: its hidden file, naming its host and pid
    import boto3

    dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, check=True).stdout)
    other = "0" * 8 if HOST != "0" * 8 else "1" * 8
    s3 = boto3.client("s3")
    stale, foreign = f"killed/.a.parquet.partial-{HOST}-{dead}", f"killed/.b.parquet.partial-{other}-{dead}"
    for key in (stale, foreign):
        s3.put_object(Bucket=bucket, Key=key, Body=b"half a file")
    md.range(4).write_parquet(f"s3://{bucket}/killed")
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="killed/")["Contents"])
    assert stale not in keys and foreign in keys  # another host's may be a live writer's
    assert sorted(r["id"] for r in md.read_parquet(f"s3://{bucket}/killed").take_all()) == [0, 1, 2, 3]


def test_a_read_without_credentials_names_the_fix(monkeypatch, tmp_path):
    """The seed overview's ``read_parquet("s3://my-bucket/training-data/")`` on a machine without AWS credentials
    raised botocore's bare ``NoCredentialsError: Unable to locate credentials``."""
    import s3fs

    without_aws_credentials(monkeypatch, str(tmp_path))
    try:
        with pytest.raises(PermissionError) as info:
            md.read_parquet("s3://my-bucket/training-data/")
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
    message = str(info.value)
    assert message.startswith("read_parquet('s3://my-bucket/training-data/'): this machine has no credentials"), message
    assert "AWS_ACCESS_KEY_ID" in message and "read_parquet(filesystem=...)" in message, message
    assert "s3://anonymous@<bucket>/<path>" in message, message
