-- Fan-out delivers an event to a webhook endpoint or integration only if it was subscribed when
-- the event happened: `subscribed_at` is set at creation and moved to the change's time when the
-- target is switched back on or its event list changes. An event emitted while a target was off,
-- or before its list gained the event's type, is then never delivered by a fan-out that runs
-- after the change.
ALTER TABLE webhook_endpoints ADD COLUMN subscribed_at BIGINT;
UPDATE webhook_endpoints SET subscribed_at = created_at;
ALTER TABLE external_integrations ADD COLUMN subscribed_at BIGINT;
UPDATE external_integrations SET subscribed_at = created_at;
