/* qnn_abi.h: the part of Qualcomm's QNN C interface the delegate uses,
 * declared here from the ABI facts (layouts, enum values, the order of the
 * function table) measured against libQnnHtp.so of QAIRT 2.51 (core API
 * 2.40, HTP backend API 5.51). No SDK header is needed to build Kiln: the
 * sizes are checked at compile time below, the API version when the library
 * loads (qnn_lib.c). Names are Kiln's, not Qualcomm's. */
#ifndef KILN_QNN_ABI_H
#define KILN_QNN_ABI_H

#include <stdarg.h>
#include <stdint.h>

/* Every call returns a 64-bit error; 0 is success, the code is the low 16
 * bits. */
typedef uint64_t qnn_err;
typedef void *qnn_handle;
#define QNN_CODE(e) ((unsigned)((e)&0xFFFFu))

typedef struct {
    uint32_t major, minor, patch;
} qnn_version;

typedef struct {
    qnn_version core, backend;
} qnn_api_version;

/* Data types. */
enum {
    QNN_INT32 = 0x0032,
    QNN_UINT32 = 0x0132,
    QNN_FLOAT16 = 0x0216,
    QNN_FLOAT32 = 0x0232,
    QNN_BOOL8 = 0x0508,
    QNN_SFIXED8 = 0x0308,  /* fixed point, real = (q + offset) * scale: int8 weights */
    QNN_UFIXED8 = 0x0408,  /* unsigned fixed point: 8a activations */
    QNN_UFIXED16 = 0x0416, /* ... 16a activations */
};

/* Tensor types: what the application writes, reads, or gives as data. */
enum {
    QNN_TENSOR_APP_WRITE = 0,
    QNN_TENSOR_APP_READ = 1,
    QNN_TENSOR_NATIVE = 3,
    QNN_TENSOR_STATIC = 4,
};

enum { QNN_PARAM_SCALAR = 0, QNN_PARAM_TENSOR = 1 };

/* "No quantization" for both fields of qnn_quant. */
#define QNN_QUANT_NONE 0x7FFFFFFFu

typedef struct {
    uint32_t dtype;
    uint32_t pad;
    union {
        float f32;
        uint32_t u32;
        int32_t i32;
        uint8_t b8;
        uint64_t u64;
    };
} qnn_scalar;

typedef struct {
    uint32_t definition, encoding;
    uint64_t params[4]; /* one of the encodings below */
} qnn_quant;

/* qnn_quant.definition and .encoding when quantized. (Packed 4-bit tensors,
 * SFIXED_POINT_4, are refused by this HTP at tensor creation and block
 * encodings at finalize: measured.) */
enum {
    QNN_DEFINED = 1,
    QNN_ENC_SCALE_OFFSET = 0, /* per tensor: qnn_scale_offset */
    QNN_ENC_AXIS = 1,         /* per channel: qnn_axis_scale_offset */
    QNN_ENC_BW_AXIS = 3,      /* per channel, narrower than the container: qnn_bw_axis */
};
typedef struct {
    float scale; /* > 0 */
    int32_t offset;
} qnn_scale_offset;
typedef struct {
    int32_t axis;
    uint32_t n;
    qnn_scale_offset *so;
} qnn_axis_scale_offset;
typedef struct {
    uint32_t bitwidth; /* 4: int4 values in an int8 container */
    int32_t axis;
    uint32_t n;
    float *scales;
    int32_t *offsets;
} qnn_bw_axis;

typedef struct {
    void *data;
    uint32_t bytes;
} qnn_client_buf;

/* Tensor, version 2: the body at offset 8. */
typedef struct {
    uint32_t id; /* assigned by tensorCreateGraphTensor; execute needs it */
    const char *name;
    uint32_t type, data_format, dtype;
    qnn_quant quant;
    uint32_t rank;
    uint32_t *dims;
    uint32_t mem_type; /* 0: a client buffer */
    union {
        qnn_client_buf buf;
        void *mem_handle;
    };
    uint8_t *dynamic_dims;
    uint32_t sparse_type, sparse0, sparse1;
    uint8_t is_produced;
} qnn_tensor_v2;

typedef struct {
    uint32_t version; /* 2 */
    uint32_t pad;
    qnn_tensor_v2 v2;
} qnn_tensor;

typedef struct {
    uint32_t type; /* QNN_PARAM_* */
    const char *name;
    union {
        qnn_scalar scalar;
        qnn_tensor tensor;
    };
} qnn_param;

/* An op, version 1, passed by value. */
typedef struct {
    uint32_t version; /* 1 */
    struct {
        const char *name, *package, *type;
        uint32_t n_params;
        qnn_param *params;
        uint32_t n_in;
        qnn_tensor *in;
        uint32_t n_out;
        qnn_tensor *out;
    } v1;
} qnn_op;

/* Backend, device, context and graph configs: an option and a union at
 * offset 8; option 0 points at the backend's own ("custom") struct. */
typedef struct {
    uint32_t option;
    union {
        const void *custom;
        uint64_t u64;
    };
} qnn_config;

/* The HTP backend's custom structs. The device's has its union at offset 8
 * (at 4, deviceCreate fails with 14001). */
typedef struct {
    uint32_t option; /* 0: SoC model */
    uint32_t pad;
    union {
        uint32_t soc;
        uint64_t space[3];
    };
} qnn_htp_device_config;

typedef struct {
    uint32_t option; /* 2: precision */
    union {
        uint32_t precision; /* 1: FLOAT16 */
        uint64_t space[6];
    };
} qnn_htp_graph_config;

typedef struct {
    uint32_t option; /* 1: weight sharing */
    union {
        uint8_t weight_sharing; /* a C bool */
        uint64_t space[4];
    };
} qnn_htp_context_config;

enum {
    QNN_HTP_DEVICE_SOC = 0,
    QNN_HTP_GRAPH_PRECISION = 2,
    QNN_HTP_PRECISION_FLOAT16 = 1,
    QNN_HTP_CONTEXT_WEIGHT_SHARING = 1,
};

/* One profiling event: QNN_PROFILE_* type and unit, its value, its name
 * (per-op events: the op's name, then ":OpId_N"). */
typedef struct {
    uint32_t type, unit;
    uint64_t value;
    const char *identifier;
} qnn_profile_data;
enum { QNN_PROFILE_BASIC = 1, QNN_PROFILE_DETAILED = 2 };
/* Event types an HTP execute reports (units: microseconds unless said). */
enum {
    QNN_PROFILE_EXECUTE_TIME = 400,  /* QNN (execute) time */
    QNN_PROFILE_NODE = 404,          /* one op, cycles: a sub-event of the cycles */
    QNN_PROFILE_HTP_CYCLES = 3003,   /* Accelerator (execute) time, cycles */
    QNN_PROFILE_HTP_VTCM = 3010,     /* Time for initial VTCM acquire */
    QNN_PROFILE_HTP_POWER_ON = 3011, /* Time for HVX + HMX power on and acquire */
    QNN_PROFILE_HTP_THREADS = 8001,  /* Number of HVX threads used (a count) */
};

typedef void (*qnn_log_fn)(const char *fmt, uint32_t level, uint64_t timestamp, va_list ap);

/* The function table, in the library's order (older public headers lack
 * slots 2, 16, 29 and 33). Slots Kiln does not call are void pointers. */
typedef struct {
    qnn_err (*property_has_capability)(uint32_t);
    qnn_err (*backend_create)(qnn_handle log, const qnn_config **cfg, qnn_handle *be);
    void *backend_set_config;
    qnn_err (*backend_get_api_version)(qnn_api_version *);
    qnn_err (*backend_get_build_id)(const char **);
    void *backend_register_op_package;
    void *backend_get_supported_operations;
    qnn_err (*backend_validate_op_config)(qnn_handle be, qnn_op op);
    qnn_err (*backend_free)(qnn_handle be);
    qnn_err (*context_create)(qnn_handle be, qnn_handle dev, const qnn_config **cfg,
                              qnn_handle *ctx);
    void *context_set_config;
    qnn_err (*context_get_binary_size)(qnn_handle ctx, uint64_t *size);
    qnn_err (*context_get_binary)(qnn_handle ctx, void *buf, uint64_t cap, uint64_t *written);
    qnn_err (*context_create_from_binary)(qnn_handle be, qnn_handle dev, const qnn_config **cfg,
                                          const void *buf, uint64_t size, qnn_handle *ctx,
                                          qnn_handle profile);
    qnn_err (*context_free)(qnn_handle ctx, qnn_handle profile);
    qnn_err (*graph_create)(qnn_handle ctx, const char *name, const qnn_config **cfg,
                            qnn_handle *graph);
    void *graph_create_subgraph;
    void *graph_set_config;
    qnn_err (*graph_add_node)(qnn_handle graph, qnn_op op);
    qnn_err (*graph_finalize)(qnn_handle graph, qnn_handle profile, qnn_handle signal);
    qnn_err (*graph_retrieve)(qnn_handle ctx, const char *name, qnn_handle *graph);
    qnn_err (*graph_execute)(qnn_handle graph, const qnn_tensor *in, uint32_t n_in, qnn_tensor *out,
                             uint32_t n_out, qnn_handle profile, qnn_handle signal);
    void *graph_execute_async;
    void *tensor_create_context_tensor;
    qnn_err (*tensor_create_graph_tensor)(qnn_handle graph, qnn_tensor *t);
    qnn_err (*log_create)(qnn_log_fn fn, uint32_t level, qnn_handle *log);
    void *log_set_level;
    qnn_err (*log_free)(qnn_handle log);
    qnn_err (*profile_create)(qnn_handle be, uint32_t level, qnn_handle *profile); /* 28 */
    void *profile_set_config;
    qnn_err (*profile_get_events)(qnn_handle profile, const uint64_t **events, uint32_t *n);
    qnn_err (*profile_get_sub_events)(uint64_t event, const uint64_t **events, uint32_t *n);
    qnn_err (*profile_get_event_data)(uint64_t event, qnn_profile_data *data);
    void *profile_get_extended_event_data;
    qnn_err (*profile_free)(qnn_handle profile); /* 34 */
    void *mem_slots[5]; /* memRegister .. deviceGetInfrastructure (35..39) */
    qnn_err (*device_create)(qnn_handle log, const qnn_config **cfg, qnn_handle *dev);
    void *device_set_config;
    void *device_get_info;
    qnn_err (*device_free)(qnn_handle dev);
    void *signal_slots[4];
    qnn_err (*error_get_message)(qnn_err e, const char **msg); /* slot 48 */
} qnn_fn;

typedef struct {
    uint32_t backend_id;
    const char *provider_name;
    qnn_api_version api;
    qnn_fn fn;
} qnn_provider;

/* QnnInterface_getProviders */
typedef qnn_err (*qnn_get_providers_fn)(const qnn_provider ***list, uint32_t *n);

_Static_assert(sizeof(qnn_tensor_v2) == 136, "QNN tensor v2 body is 136 bytes");
_Static_assert(sizeof(qnn_tensor) == 144, "QNN tensor is 144 bytes");
_Static_assert(sizeof(qnn_param) == 160, "QNN param is 160 bytes");
_Static_assert(sizeof(qnn_op) == 80, "QNN op config is 80 bytes");
_Static_assert(sizeof(qnn_quant) == 40, "QNN quantize params are 40 bytes");
_Static_assert(sizeof(qnn_bw_axis) <= sizeof(((qnn_quant *)0)->params),
               "QNN bitwidth axis encoding fits the quantize params");
_Static_assert(sizeof(qnn_axis_scale_offset) <= sizeof(((qnn_quant *)0)->params),
               "QNN encodings fit qnn_quant.params");
_Static_assert(__builtin_offsetof(qnn_fn, error_get_message) == 48 * sizeof(void *),
               "errorGetMessage is slot 48 of the function table");
_Static_assert(__builtin_offsetof(qnn_fn, device_create) == 40 * sizeof(void *),
               "deviceCreate is slot 40");
_Static_assert(__builtin_offsetof(qnn_fn, profile_create) == 28 * sizeof(void *),
               "QNN function table: profileCreate is slot 28");
_Static_assert(__builtin_offsetof(qnn_fn, profile_free) == 34 * sizeof(void *),
               "QNN function table: profileFree is slot 34");
_Static_assert(sizeof(qnn_profile_data) == 24, "QNN profile event data is 24 bytes");
_Static_assert(__builtin_offsetof(qnn_fn, log_create) == 25 * sizeof(void *),
               "logCreate is slot 25");

#endif /* KILN_QNN_ABI_H */
