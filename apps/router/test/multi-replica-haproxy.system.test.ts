import { describeReplicaComparison } from './replica-comparison';

/** System test (`npm run test:system`): the replicas behind HAProxy, which this machine must have. */
describeReplicaComparison('haproxy');
