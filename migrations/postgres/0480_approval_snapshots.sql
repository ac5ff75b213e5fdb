-- An approval-gated certificate request keeps the template it was judged under: approval
-- issues with that snapshot, so editing the template while the request waits cannot change
-- what the approver approved (issue 21, finding 6). NULL for requests made before.
ALTER TABLE certificate_requests ADD COLUMN template_snapshot TEXT;
