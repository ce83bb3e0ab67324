"""The results store: every campaign in one SQLite file (db.py), queried as tidy tables
(query.py), exported to a Prometheus Pushgateway (pushgw.py). The JSON result folders stay the
source of truth; the store is an index over them that can always be rebuilt by importing."""
