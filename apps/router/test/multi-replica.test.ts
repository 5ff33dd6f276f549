import { describeReplicaComparison } from './replica-comparison';

describeReplicaComparison('client-rotation');
