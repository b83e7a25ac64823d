-- The price book's GPU-hour and energy prices (latest version of each entry).
SELECT resource, gpu_model, pool, currency, toString(price) AS price, effective_from
FROM {db:Identifier}.price_book FINAL
ORDER BY resource, gpu_model, pool, effective_from
