"""A fleet's tail (replicas behind a router): one replica slower than the others, requests routed to a
busier replica, failures on one replica (docs/diagnosis.md, "A fleet of replicas")."""
