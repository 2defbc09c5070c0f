package hostcalls

// proxy_register_shared_queue(name_ptr, name_len, ret_id_ptr) → status
//
//	name_ptr   ──► [ name_len bytes ]   (read)
//	ret_id_ptr ──► [ u32 LE queue id ]  (written)
//
// Registers (or finds) the queue name of this VM id; the registering VM's
// root context gets proxy_on_queue_ready(root, id) when data is enqueued,
// posted to its worker after the enqueuing callback (never inside
// proxy_enqueue_shared_queue). Registering a name again, from any VM of the
// VM id, keeps the id and the items and moves the notifications to the new
// registrant.
//
// proxy_resolve_shared_queue(vm_id_ptr, vm_id_len, name_ptr, name_len, ret_id_ptr) → status
//
//	vm_id_ptr  ──► [ vm_id_len bytes ]  (read)
//	name_ptr   ──► [ name_len bytes ]   (read)
//	ret_id_ptr ──► [ u32 LE queue id ]  (written)
//
// An empty vm_id means this VM's own. Results: OK; NOT_FOUND if no such
// queue is registered.
//
// proxy_enqueue_shared_queue(queue_id, data_ptr, data_len) → status
//
//	data_ptr ──► [ data_len bytes ]   (read)
//
// Results: OK (also when the registering VM is gone: the item stays and
// nobody is notified); NOT_FOUND for an unknown id, or once every VM of
// the queue's VM id is gone.
//
// proxy_dequeue_shared_queue(queue_id, ret_ptr_ptr, ret_size_ptr) → status
//
//	ret_ptr_ptr  ──► [ u32 LE ptr ] ──► [ size bytes item ]  (written; allocated)
//	ret_size_ptr ──► [ u32 LE size ]
//
// Results: OK; EMPTY when the queue has no item; NOT_FOUND for an unknown id.

// RegisterSharedQueue registers the shared queue name and returns its id;
// OnQueueReady(id) then runs on this VM's plugin context when an item is
// enqueued. Every worker VM runs the same code, so to be woken alone a VM
// registers a name of its own (the last VM to register a name gets its
// notifications).
func RegisterSharedQueue(name string) (uint32, error) {
	beginCall(0)
	if err := Status(proxyRegisterSharedQueue(strPtr(name), u32(len(name)), &retU32)).Err(); err != nil {
		return 0, err
	}
	return retU32, nil
}

// ResolveSharedQueue returns the id of the queue name registered by a VM
// with vmID ("" for this VM's own VM id, which is what Istio's VMs share);
// types.ErrorStatusNotFound if there is none.
func ResolveSharedQueue(vmID, name string) (uint32, error) {
	beginCall(0)
	if err := Status(proxyResolveSharedQueue(strPtr(vmID), u32(len(vmID)), strPtr(name), u32(len(name)), &retU32)).Err(); err != nil {
		return 0, err
	}
	return retU32, nil
}

// EnqueueSharedQueue appends data to queue id and wakes the VM that
// registered it (OnQueueReady, after the running callback returns).
func EnqueueSharedQueue(id uint32, data []byte) error {
	return Status(proxyEnqueueSharedQueue(id, bytesPtr(data), u32(len(data)))).Err()
}

// DequeueSharedQueue removes and returns the oldest item of queue id;
// types.ErrorStatusEmpty when there is none.
func DequeueSharedQueue(id uint32) ([]byte, error) {
	beginCall(0)
	return returnedBytes(proxyDequeueSharedQueue(id, &retPtr, &retSize))
}
