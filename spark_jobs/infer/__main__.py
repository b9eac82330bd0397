"""``python -m spark_jobs.infer``: the infer job (``spark_jobs.infer.job``)."""

from spark_jobs.infer.job import main
from spark_jobs.streaming_job import main_entry

main_entry(main)
