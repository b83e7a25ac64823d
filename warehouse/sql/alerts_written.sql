-- Whether alerting and advice have written anything yet (to tell "none yet" from "none open").
SELECT (SELECT count() FROM {db:Identifier}.alerts) AS alerts,
       (SELECT count() FROM {db:Identifier}.advice) AS advice
