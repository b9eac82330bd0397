"""``python -m spark_jobs.infer``: the infer job (``spark_jobs.infer.job``)."""

from spark_jobs.infer.job import main
from spark_jobs.job_shell import main_entry

main_entry(main)
