//! Typed row structs with their `::weir::Row` impl (Arrow conversion both ways).

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote};
use syn::{Attribute, Ident};

use crate::types::{data_type_tokens, rust_type_name, rust_type_tokens, ColType};

/// One field of a row struct.
pub struct RowField {
    /// The Rust field name.
    pub ident: Ident,
    /// The column name.
    pub name: String,
    /// The column type.
    pub ty: ColType,
    /// Doc comments; a generated one when empty.
    pub docs: Vec<Attribute>,
}

/// A field identifier for a column name (raw when the name is a Rust keyword).
pub fn field_ident(name: &str, span: Span) -> Ident {
    if syn::parse_str::<Ident>(name).is_ok() {
        Ident::new(name, span)
    } else {
        Ident::new_raw(name, span)
    }
}

/// `pub struct Name { ... }` deriving Debug, Clone, PartialEq, and its
/// `::weir::Row` impl: `fields()` spelled out from the declared types, the
/// conversions through `::weir::ArrowValue`.
pub fn row_struct(ident: &Ident, doc: &str, fields: &[RowField]) -> TokenStream {
    let decls = fields.iter().map(|f| {
        let id = &f.ident;
        let ty = rust_type_tokens(f.ty);
        let docs = if f.docs.is_empty() {
            let d = format!("Column `{}` ({}).", f.name, rust_type_name(f.ty));
            quote!(#[doc = #d])
        } else {
            let a = &f.docs;
            quote!(#(#a)*)
        };
        quote!(#docs pub #id: #ty,)
    });
    let names: Vec<&str> = fields.iter().map(|f| f.name.as_str()).collect();
    let dtypes = fields.iter().map(|f| data_type_tokens(f.ty.dtype));
    let ids: Vec<&Ident> = fields.iter().map(|f| &f.ident).collect();
    let tys: Vec<TokenStream> = fields.iter().map(|f| rust_type_tokens(f.ty)).collect();
    let cols: Vec<Ident> = (0..fields.len())
        .map(|i| format_ident!("__weir_col{}", i))
        .collect();
    let vals: Vec<Ident> = (0..fields.len())
        .map(|i| format_ident!("__weir_val{}", i))
        .collect();
    quote! {
        #[doc = #doc]
        #[derive(Debug, Clone, PartialEq)]
        pub struct #ident {
            #(#decls)*
        }

        impl ::weir::Row for #ident {
            fn fields() -> ::std::vec::Vec<::weir::plan::Field> {
                ::std::vec![
                    #(::weir::plan::Field {
                        name: ::std::string::String::from(#names),
                        dtype: #dtypes,
                    },)*
                ]
            }

            fn to_batch(
                rows: &[Self],
            ) -> ::weir::Result<::weir::arrow::record_batch::RecordBatch> {
                ::weir::row::batch_from_arrays(
                    <Self as ::weir::Row>::fields(),
                    ::std::vec![
                        #(<#tys as ::weir::ArrowValue>::to_array(
                            rows.iter().map(|r| ::std::clone::Clone::clone(&r.#ids)).collect(),
                        ),)*
                    ],
                )
            }

            fn from_batch(
                batch: &::weir::arrow::record_batch::RecordBatch,
            ) -> ::weir::Result<::std::vec::Vec<Self>> {
                #(let mut #cols = <#tys as ::weir::ArrowValue>::from_array(
                    ::weir::row::column(batch, #names)?,
                )?.into_iter();)*
                let mut rows = ::std::vec::Vec::with_capacity(batch.num_rows());
                for _ in 0..batch.num_rows() {
                    match (#(#cols.next(),)*) {
                        (#(::std::option::Option::Some(#vals),)*) => rows.push(#ident { #(#ids: #vals,)* }),
                        _ => break,
                    }
                }
                ::std::result::Result::Ok(rows)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_plan::DataType;

    #[test]
    fn generates_a_row_struct() {
        let fields = vec![
            RowField {
                ident: field_ident("page", Span::call_site()),
                name: "page".into(),
                ty: ColType::new(DataType::String),
                docs: vec![],
            },
            RowField {
                ident: field_ident("type", Span::call_site()),
                name: "type".into(),
                ty: ColType::nullable(DataType::Int64),
                docs: vec![],
            },
        ];
        let out = row_struct(&format_ident!("Click"), "doc", &fields).to_string();
        assert!(
            out.contains("pub r#type : :: std :: option :: Option < i64 >"),
            "{out}"
        );
        assert!(out.contains("# [doc = \"Column `type` (Option<i64>).\"]"));
        assert!(out.contains("dtype : :: weir :: plan :: DataType :: String"));
        assert!(out.contains(":: weir :: row :: column (batch , \"type\") ?"));
        syn::parse2::<syn::File>(row_struct(&format_ident!("Click"), "doc", &fields)).unwrap();
    }
}
