//! The one way the server's Redis users (fair shares, durable tasks,
//! shared sessions) connect: a lazily made connection manager that
//! reconnects by itself, with each operation bounded in time, so that a
//! Redis that is down costs a request at most its own timeout.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::OnceCell;

/// The connection `cell` holds, made on first use for `client`, every
/// connect and response bounded by `timeout`, one retry.
pub(crate) async fn connection(
    cell: &OnceCell<ConnectionManager>,
    client: &redis::Client,
    timeout: Duration,
) -> Result<ConnectionManager, redis::RedisError> {
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(1)
        .set_min_delay(Duration::from_millis(50))
        .set_max_delay(Duration::from_millis(200));
    cell.get_or_try_init(|| async {
        ConnectionManager::new_lazy_with_config(client.clone(), config)
    })
    .await
    .cloned()
}
