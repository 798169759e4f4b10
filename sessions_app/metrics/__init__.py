"""Prometheus metrics (docs/guide/metrics.md): the instruments every layer counts with (instruments.py, support),
the merge of dead processes' files (multiprocess.py) and the scrape served at /metrics (exposition.py).

Empty on purpose: services and the live side import `sessions_app.lib.instruments`, which loads this
package first, and nothing of the doors may come with it.
"""
