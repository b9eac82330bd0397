-- The payments table the postgres-cdc bundle captures (docs/cdc.md). One row is a payment and its
-- latest event: its columns are the enrich job's raw fields by name, and their types make Debezium
-- write exactly the raw format's JSON types (the bundle sets decimal.handling.mode=string):
--   numeric(14, 3)  -> "12.340"                    (amount: decimal text in major units; three decimals
--                                                  cover every currency, trailing zeros are fine)
--   boolean         -> true / false                (card_present)
--   timestamptz(3)  -> "2026-01-05T10:00:00.123Z"  (event_time: UTC, milliseconds; a plain timestamptz
--                                                  has microseconds, which enrich rejects: bad_timestamp)
--   text            -> "..."
-- event_id and event_time identify the event: an UPDATE that keeps them is the same event again (enrich
-- dead-letters it as a duplicate), an UPDATE to the payment's next status writes a new event_id with a
-- newer event_time (enrich makes it the payment's next event). The trigger refuses every other update
-- of the identity, and a change of the primary key (Debezium would make it a delete and a new payment).
CREATE TABLE payments (
    payment_id text PRIMARY KEY,
    event_id text NOT NULL UNIQUE,
    customer_id text NOT NULL,
    merchant_id text NOT NULL,
    amount numeric(14, 3) NOT NULL,
    currency text NOT NULL,
    country text NOT NULL,
    card_present boolean NOT NULL,
    channel text NOT NULL,
    card_number text NOT NULL,
    merchant_category_code text NOT NULL,
    status text NOT NULL,
    event_time timestamptz(3) NOT NULL
);

CREATE OR REPLACE FUNCTION payments_event_identity() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.payment_id <> OLD.payment_id THEN
        RAISE EXCEPTION 'payment %: payment_id never changes (insert a new payment instead)', OLD.payment_id;
    END IF;
    IF NEW.event_id = OLD.event_id AND NEW.event_time <> OLD.event_time THEN
        RAISE EXCEPTION 'payment %: event_time changes only with a new event_id', OLD.payment_id;
    END IF;
    IF NEW.event_id <> OLD.event_id AND NEW.event_time <= OLD.event_time THEN
        RAISE EXCEPTION 'payment %: a new event_id needs a newer event_time', OLD.payment_id;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER event_identity BEFORE UPDATE ON payments FOR EACH ROW EXECUTE FUNCTION payments_event_identity();
