use serde_json::Value;
use trellis_tests::certs::Spec;
use trellis_tests::{Client, Server};

async fn seed(client: &Client, n: usize) -> Vec<i64> {
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(client.register(&Spec::tls(&format!("p{i:03}.example.com")).pem()).await["id"].as_i64().unwrap());
    }
    ids
}

fn ids(body: &Value) -> Vec<i64> {
    body["data"].as_array().unwrap().iter().map(|c| c["id"].as_i64().unwrap()).collect()
}

#[tokio::test]
async fn pagination_follows_the_spec() {
    let server = Server::start();
    let client = server.key_client(&["certificates:read", "certificates:write"]).await;
    let created = seed(&client, 130).await;
    let newest_first: Vec<i64> = created.iter().rev().copied().collect();

    let default = client.get("/api/certificates").await;
    assert_eq!(default.body["total"], 130);
    assert_eq!(default.body["totalExact"], true);
    assert_eq!(default.body["limit"], 50);
    assert_eq!(default.body["page"], 1);
    assert_eq!(default.body["totalPages"], 3);
    assert_eq!(ids(&default.body), newest_first[..50], "creation date descending");

    let zero = client.get("/api/certificates?page=0").await;
    assert_eq!(ids(&zero.body), ids(&default.body), "page=0 is clamped to 1");
    let negative = client.get("/api/certificates?page=-4").await;
    assert_eq!(ids(&negative.body), ids(&default.body));

    let big = client.get("/api/certificates?limit=500").await;
    assert_eq!(big.body["data"].as_array().unwrap().len(), 100, "limit=500 returns 100");
    assert_eq!(big.body["limit"], 100);
    let tiny = client.get("/api/certificates?limit=0").await;
    assert_eq!(tiny.body["data"].as_array().unwrap().len(), 1, "limit is clamped to at least 1");

    let page3 = client.get("/api/certificates?page=3&limit=25").await;
    let offset50 = client.get("/api/certificates?offset=50&limit=25").await;
    assert_eq!(ids(&page3.body), ids(&offset50.body));
    assert_eq!(ids(&page3.body), newest_first[50..75]);
    assert_eq!(offset50.body["page"], 3);

    let both = client.get("/api/certificates?page=5&offset=50&limit=25").await;
    assert_eq!(ids(&both.body), ids(&offset50.body), "offset overrides page");

    let past_end = client.get("/api/certificates?page=99").await;
    assert_eq!(past_end.status, 200);
    assert!(past_end.body["data"].as_array().unwrap().is_empty());
    assert_eq!(past_end.body["total"], 130);

    assert_eq!(client.get("/api/certificates?page=abc").await.status, 400);
    assert_eq!(client.get("/api/certificates?limit=1.5").await.status, 400);
}
