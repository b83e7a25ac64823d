-- The database every table lives in.
CREATE DATABASE IF NOT EXISTS ${db} ${on_cluster}
