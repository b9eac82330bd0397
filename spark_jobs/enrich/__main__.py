"""``python -m spark_jobs.enrich``: the enrich job (``spark_jobs.enrich.job``)."""

from spark_jobs.enrich.job import main
from spark_jobs.streaming_job import main_entry

main_entry(main)
