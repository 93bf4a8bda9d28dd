"""The seed page's example on a local cluster: load, process on GPUs, aggregate in 70 GB.

Three workers as on the page: two offering GPU=2 and one offering MEMORY=100e9. Each load runs
anywhere, each process step needs GPU=1 (and is pinned to one device with
CUDA_VISIBLE_DEVICES), and the aggregate needs MEMORY=70e9, so only the third worker can run
it. Without GPUs on this machine the GPU=2 workers offer abstract devices 0 and 1.

    python examples/resources_pipeline.py
"""

import os
import time

import dsched
from dsched import Client, LocalCluster


def load(filename):
    return {"file": filename, "data": list(range(10)), "loaded_on": os.environ["SCHED_WORKER_NAME"]}


def process(record):
    time.sleep(0.2)  # stands in for work on the GPU
    return {
        **record,
        "total": sum(record["data"]),
        "processed_on": os.environ["SCHED_WORKER_NAME"],
        "gpus": dsched.get_gpu_ids(),
        "cuda_visible_devices": os.environ["CUDA_VISIBLE_DEVICES"],
    }


def aggregate(records):
    return {"total": sum(r["total"] for r in records), "aggregated_on": os.environ["SCHED_WORKER_NAME"]}


def main():
    filenames = [f"part-{i}.csv" for i in range(8)]
    with LocalCluster(n_workers=0) as cluster:
        cluster.start_worker(resources="GPU=2", nthreads=4, name="gpu-a")
        cluster.start_worker(resources="GPU=2", nthreads=4, name="gpu-b")
        cluster.start_worker(resources="MEMORY=100e9", nthreads=2, name="bigmem")
        with Client(cluster) as client:
            data = [client.submit(load, fn) for fn in filenames]
            processed = [client.submit(process, d, resources={"GPU": 1}) for d in data]
            final = client.submit(aggregate, processed, resources={"MEMORY": 70e9})

            for record in client.gather(processed):
                print(f"{record['file']}: loaded on {record['loaded_on']}, processed on "
                      f"{record['processed_on']} with GPU {record['gpus']} "
                      f"(CUDA_VISIBLE_DEVICES={record['cuda_visible_devices']})")
            result = final.result()
            print(f"aggregate: total {result['total']} on {result['aggregated_on']} (MEMORY=70e9)")


if __name__ == "__main__":
    main()
