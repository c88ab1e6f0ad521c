/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Wire formats of the socket net plugin: the 128-byte connection handle written by
 * listen, the hello each connecting socket sends, the accept acknowledgement and the
 * per-message header. Multi-byte fields travel little-endian. The conformance kit
 * (tests/plugins) includes this file to forge a handle with a wrong secret.
 */
#ifndef NETSOCK_HANDLE_H_
#define NETSOCK_HANDLE_H_

#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>

#define NETSOCK_HANDLE_MAGIC 0x4b535242u /* "BRSK": a handle written by this plugin */
#define NETSOCK_HELLO_MAGIC 0x4f4c4548u  /* "HELO": first bytes on every new socket */
#define NETSOCK_ACK_MAGIC 0x4b434341u    /* "ACCK": the listener accepted the connection */
#define NETSOCK_MSG_MAGIC 0x3147534du    /* "MSG1": start of every message header */
#define NETSOCK_WIRE_VERSION 1

/* Largest number of data sockets of one connection (NCCL's limit: threads x socks). */
#define NETSOCK_MAX_SOCKS 64
/* Largest number of helper threads of one connection side. */
#define NETSOCK_MAX_THREADS 16

/* A listening address, IPv4 or IPv6, as bind/connect take it. */
typedef union {
    struct sockaddr sa;
    struct sockaddr_in sin;
    struct sockaddr_in6 sin6;
} netsock_addr_t;

/*
 * The connection handle (fits NCCL_NET_HANDLE_MAXSIZE). The listener's transport
 * settings travel with it so both ends split messages the same way.
 */
typedef struct {
    uint32_t magic;    /* NETSOCK_HANDLE_MAGIC */
    uint16_t version;  /* NETSOCK_WIRE_VERSION */
    uint16_t nsocks;   /* data sockets per connection; 0: all data on the control socket */
    uint16_t nthreads; /* helper threads serving the data sockets on each side */
    uint16_t reserved;
    uint32_t min_chunk;  /* smallest piece a message is split into across data sockets */
    uint64_t inline_max; /* messages up to this size travel on the control socket */
    uint64_t secret;     /* random per listen; a connection must present it */
    netsock_addr_t addr; /* where the listener waits */
} netsock_handle_t;

/* Sent by the connecting side on each of its sockets (32 bytes). */
typedef struct {
    uint32_t magic;   /* NETSOCK_HELLO_MAGIC */
    uint16_t version; /* NETSOCK_WIRE_VERSION */
    uint16_t index;   /* 0: control socket, 1..nsocks: data sockets */
    uint16_t nsocks;  /* data sockets the connector opens */
    uint16_t reserved[3];
    uint64_t secret; /* copied from the handle */
    uint64_t nonce;  /* random per connection: groups the sockets of one connection */
} netsock_hello_t;

/* Sent back by the listener on the control socket once every socket arrived. */
typedef struct {
    uint32_t magic; /* NETSOCK_ACK_MAGIC */
    uint32_t nsocks;
} netsock_ack_t;

/* Precedes every message on the control socket (16 bytes). */
typedef struct {
    uint64_t size;  /* bytes of the message */
    uint32_t seq;   /* low 32 bits of the message number on this connection */
    uint32_t magic; /* NETSOCK_MSG_MAGIC */
} netsock_msg_hdr_t;

_Static_assert(sizeof(netsock_handle_t) <= 128, "the handle must fit NCCL_NET_HANDLE_MAXSIZE");
_Static_assert(sizeof(netsock_hello_t) == 32, "hello is 32 bytes on the wire");
_Static_assert(sizeof(netsock_msg_hdr_t) == 16, "message header is 16 bytes on the wire");

#endif /* NETSOCK_HANDLE_H_ */
