import type { Subscriber } from 'zeromq';
import type { ZeromqModule } from './kv-events-metrics';
import type { WireLimits } from './wire';

export interface LiveSocketOptions {
  readonly zmq: ZeromqModule;
  readonly endpoint: string;
  readonly topic: string;
  readonly maxQueuedBatches: number;
  readonly limits: WireLimits;
}

/**
 * A disconnected SUB with no new connection after this long is dialled again, ms. libzmq reconnects by
 * itself after a network error, but not after a protocol error, which a frame over maxMessageSize is:
 * without this, one oversized batch would leave the rank unread for good. At most one dial per
 * disconnection, so a publisher that keeps sending such frames costs a connection a second.
 */
const REDIAL_AFTER_MS = 1000;

/**
 * The SUB socket on a rank's PUB endpoint, bounded in bytes (maxMessageSize: zeromq cuts off a peer
 * sending a bigger frame, never buffering it) and in messages (the high-water mark). `onReconnected`
 * runs when it connects again after losing its connection (a publisher restart, a network break, a cut).
 * Throws when zeromq refuses the endpoint (`tcp://*:5557`).
 */
export function openLiveSocket(options: LiveSocketOptions, onReconnected: () => void): Subscriber {
  const { endpoint } = options;
  const subscriber = new options.zmq.Subscriber({
    receiveHighWaterMark: options.maxQueuedBatches,
    maxMessageSize: options.limits.maxBatchBytes ?? -1,
    linger: 0,
  });
  let disconnected = false;
  let redial: NodeJS.Timeout | null = null;
  const clearRedial = () => {
    if (redial !== null) clearTimeout(redial);
    redial = null;
  };
  subscriber.connect(endpoint);
  subscriber.subscribe(options.topic);
  subscriber.events.on('disconnect', () => {
    disconnected = true;
    clearRedial();
    redial = setTimeout(() => {
      redial = null;
      if (!disconnected || subscriber.closed) return;
      try {
        subscriber.disconnect(endpoint);
      } catch {
        // libzmq dropped the endpoint already (a protocol error ends its reconnection).
      }
      subscriber.connect(endpoint);
    }, REDIAL_AFTER_MS);
    redial.unref();
  });
  subscriber.events.on('connect', () => {
    clearRedial();
    if (!disconnected) return;
    disconnected = false;
    onReconnected();
  });
  subscriber.events.on('end', clearRedial);
  return subscriber;
}
